"""A classroom with no network: everything the notebooks would fetch, made ready in the course folder beforehand.

A room of learners' machines often has a poor network, or none. One command, run
by the teacher while connected (or with a copy of Multi30k on a USB stick), makes
the course folder self-sufficient::

    python -m transformer_lessons classroom [--from DIR]        # make classroom [DATA=DIR]

It runs four steps, each skipped when already done, so running it again is quick:

1. :func:`gather_data`: the twelve Multi30k files, copied from ``--from DIR`` or
   downloaded, each checked against its SHA-256, into ``classroom/cache/``. While
   ``$TRANSFORMER_LESSONS_CACHE`` is unset that folder *is* the package's cache
   (:func:`~transformer_lessons.data.files.cache_dir`), so no notebook downloads
   anything and nothing has to be set on the learners' machines.
2. :func:`tokenize_splits`: every split tokenized once, cached beside them
   (notebooks 08 to 13 and every training preset read these tokens).
3. :func:`check_course_model`: the course's model of notebooks 11 and 12, found and
   its SHA-256 checked, so that a partial copy or a Git LFS pointer shows now, not in class.
4. :func:`train_quick_model`: the ``quick`` model trained into ``runs/quick``, which
   notebook 10 then loads instead of training it on every learner's machine
   (``--no-train`` leaves that to the learners: about two minutes each).

On request (``--wheels``, ``make classroom WHEELS=yes``), :func:`download_wheels` also
keeps every Python package of the environment in ``classroom/wheels``, from which
``make learn`` then installs with no network. Copying the course folder copies
``classroom/`` and ``runs/``. :func:`readiness` (``classroom --check``) says what a
machine has, using no network and changing nothing.

Dataset: Elliott et al. (2016), "Multi30K: Multilingual English-German Image Descriptions".
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import transformer_lessons.run as training_run
from transformer_lessons.atomic import atomic_write
from transformer_lessons.data.corpus import _split_cache_path, prepare_corpus
from transformer_lessons.data.files import (
    CACHE_ENV,
    CLASSROOM_CACHE,
    DATA_ENV,
    LANGS,
    PREPARE_COMMAND,
    SHA256,
    SPLITS,
    cache_dir,
    fetch,
    file_name,
    resolve_data_dir,
    sha256_file,
)
from transformer_lessons.errors import CourseError
from transformer_lessons.pretrained import (
    COURSE_MODEL_SHA256,
    MODEL_ENV,
    PretrainedError,
    cached_copy,
    course_model_file,
    repository_copy,
)
from transformer_lessons.rundir import course_root, default_out_dir

COURSE_SPLITS = (
    "train",
    "val",
    "test_2016_flickr",
)  # what the notebooks read; the other test sets serve `evaluate --split`
WHEELS = (
    Path("classroom") / "wheels"
)  # in the course folder: every Python package, for an offline pip install (Makefile)
QUICK_RUN = "quick"  # the run notebook 10 trains with resume=True: runs/quick
Say = Callable[[str], None]


class ClassroomError(CourseError):
    """Preparing the classroom failed for a reason outside the data (no course folder, pip); the message says what to do."""


# --------------------------------------------------------------------------------------
# The four steps
# --------------------------------------------------------------------------------------


def prepare(
    source: str | os.PathLike | None = None, quick_model: bool = True, progress: bool = True, say: Say = print
) -> Path:
    """Make the course folder we are in ready for a classroom without network; returns its ``classroom/cache``.

    Args:
        source: a folder holding the Multi30k ``.gz`` files (a USB stick, a shared drive);
            default ``$TRANSFORMER_LESSONS_DATA`` when set, else download them.
        quick_model: also train the ``quick`` model into ``runs/quick``.
        progress: progress bars.
        say: where the one line per step goes.

    Raises:
        ClassroomError: not inside a course folder.
        DataError: a file missing or corrupt in ``source``; a download failed.
    """
    cache = classroom_cache_dir()
    source = source if source not in (None, "") else resolve_data_dir()
    with _using_cache(cache):
        gather_data(cache, source, progress, say)
        tokenize_splits(progress, say)
        check_course_model(progress, say)
        if quick_model:
            train_quick_model(progress, say)
    forget_progress(cache, say)
    _write_readme(cache.parent)
    return cache


def forget_progress(cache: Path, say: Say) -> None:
    """Remove a learner-progress file from the folder's cache: its verdicts are one person's (the teacher trying the
    solutions, an older version of the course that kept progress there), not every copy's."""
    for name in ("progress.json", "progress.json.lock"):
        stale = cache / name
        if stale.is_file():
            stale.unlink()
            if name == "progress.json":
                say(f"removed {stale}: one person's exercise verdicts, which every copy of the folder would show")


def gather_data(cache: Path, source: Path | None, progress: bool, say: Say) -> None:
    """Every Multi30k file into ``cache``, verified: copied from ``source``, or downloaded (into the active cache)."""
    copied = 0
    for split in SPLITS:
        for lang in LANGS:
            name = file_name(split, lang)
            if (cache / name).is_file() and sha256_file(cache / name) == SHA256[name]:
                continue
            if source is not None:
                found = fetch(
                    split, lang, data_dir=source
                )  # checked against SHA256, or a DataError that says what is wrong
                atomic_write(cache / name, lambda tmp, found=found: shutil.copyfile(found, tmp))
            else:
                fetch(split, lang, progress=progress)  # downloads into cache_dir(), which is `cache` here
            copied += 1
    how = f"copied from {source}" if source is not None else "downloaded"
    say(f"Multi30k: {len(SHA256)} files, checksums verified, in {cache}" + (f" ({copied} {how})" if copied else ""))


def tokenize_splits(progress: bool, say: Say) -> None:
    """Every split tokenized into the active cache's ``tokenized/`` (a few seconds when it is there already)."""
    prepare_corpus(splits=SPLITS, progress=progress)
    say(f"tokenized: {len(SPLITS)} splits in {cache_dir() / 'tokenized'}")


def check_course_model(progress: bool, say: Say) -> None:
    """The course's model: the repository's copy checked, or downloaded once into the active cache."""
    path = course_model_file(progress)
    say(f"the course's model: {_shown(path)}, checksum verified")


def train_quick_model(progress: bool, say: Say) -> None:
    """The ``quick`` run of notebook 10, trained (or finished) in ``runs/quick``."""
    result = training_run.train(
        QUICK_RUN, out_dir=default_out_dir(QUICK_RUN), resume=True, progress=progress, log=progress
    )
    bleu = f", test BLEU {result['test']['bleu']:.2f}" if result.get("test") else ""
    say(f"the quick model: {default_out_dir(QUICK_RUN)}, {result['step']} updates{bleu}")


def download_wheels(torch_index: str | None = None, say: Say = print) -> Path:
    """Every package of this Python environment (``pip freeze``), plus pip and setuptools, into ``classroom/wheels``.

    ``make learn`` installs from there alone when it holds wheels (the Makefile sets
    ``PIP_NO_INDEX`` and ``PIP_FIND_LINKS``), so a learner's machine needs no network
    to install the course either. The wheels are this machine's: the learners' need the
    same operating system, processor type and Python version.

    Args:
        torch_index: where PyTorch comes from; default from this environment's build:
            ``2.13.0+cpu`` -> https://download.pytorch.org/whl/cpu, a plain version -> PyPI.

    Raises:
        ClassroomError: pip could not download them (the message ends with pip's last line).
    """
    folder = course_folder() / WHEELS
    pins = _frozen_requirements()
    index = torch_index or _torch_index(pins)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--dest",
        str(folder),
        "pip",
        "setuptools>=77",
        "wheel",
        *pins,
    ]
    command += ["--extra-index-url", index] if index else []
    env = {
        k: v for k, v in os.environ.items() if k != "PIP_NO_INDEX"
    }  # the Makefile's offline install switch: not here
    done = subprocess.run(command, stderr=subprocess.PIPE, text=True, env=env)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise ClassroomError(
            f"pip could not download the packages into {folder} (exit status {done.returncode}): {last}"
        )
    say(
        f"Python packages: {len(list(folder.glob('*')))} files in {_shown(folder)} ({_size(folder)}), for {_platform()}"
    )
    return folder


def _frozen_requirements() -> list[str]:
    """``name==version`` of every installed package but the course's own (an editable install)."""
    freeze = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"], capture_output=True, text=True
    )
    if freeze.returncode != 0:
        raise ClassroomError(f"pip freeze failed: {freeze.stderr.strip()[-300:]}; is pip installed in {sys.prefix}?")
    return [line for line in freeze.stdout.splitlines() if line.strip() and not line.startswith(("#", "-e "))]


def _torch_index(pins: list[str]) -> str | None:
    """PyTorch's own index for a local build such as ``torch==2.13.0+cpu`` (PyPI has none); ``None`` for PyPI's."""
    for pin in pins:
        name, _, version = pin.partition("==")
        if name.lower() == "torch" and "+" in version:
            return f"https://download.pytorch.org/whl/{version.split('+', 1)[1]}"
    return None


def _size(folder: Path) -> str:
    return f"{sum(p.stat().st_size for p in folder.glob('*') if p.is_file()) / 1e6:,.0f} MB"


def _platform() -> str:
    return f"{platform.system()} {platform.machine()}, Python {platform.python_version()}"


# --------------------------------------------------------------------------------------
# Is this machine ready?
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One line of :func:`readiness`."""

    what: str
    ready: bool
    detail: str
    needed: bool = True  # False: a class can do without it (it only saves time)

    def __str__(self) -> str:
        mark = "✔" if self.ready else "✘" if self.needed else "·"
        return f"{mark} {self.what}: {self.detail}"


def readiness() -> list[Item]:
    """What the notebooks will find on this machine, with no network: data, tokens, the course's model, runs, wheels."""
    items = [_data_item(), _tokens_item(), _model_item(), _quick_item()]
    root = course_root()
    wheels = list((root / WHEELS).glob("*.whl")) if root is not None else []
    detail = (
        f"{len(wheels)} wheels in {WHEELS}: make learn installs from them, offline"
        if wheels
        else "none (make classroom WHEELS=yes)"
    )
    return [*items, Item("Python packages to install offline", bool(wheels), detail, needed=False)]


def _data_item() -> Item:
    local = resolve_data_dir()
    folder = local if local is not None else cache_dir()
    bad = [
        name for name, digest in SHA256.items() if not (folder / name).is_file() or sha256_file(folder / name) != digest
    ]
    where = f"{folder} (${DATA_ENV})" if local is not None else _cache_shown()
    needed = [file_name(split, lang) for split in COURSE_SPLITS for lang in LANGS]
    ready = not set(bad) & set(needed)
    if bad:
        detail = f"{len(bad)} of {len(SHA256)} files missing or corrupt in {where}: {', '.join(bad)}"
        return Item("Multi30k", ready, detail + ("; the notebooks need none of them" if ready else ""))
    return Item("Multi30k", True, f"{len(SHA256)} files, checksums verified, in {where}")


def _tokens_item() -> Item:
    missing = [split for split in SPLITS if not _split_cache_path(split).is_file()]
    detail = f"{len(SPLITS) - len(missing)} of {len(SPLITS)} splits in {_cache_shown()}/tokenized"
    if missing:
        detail += f"; missing: {', '.join(missing)} (tokenized when first used: slower, not offline-critical)"
    return Item("tokenized splits", not missing, detail, needed=False)


def _model_item() -> Item:
    own = os.environ.get(MODEL_ENV, "").strip()
    if own:
        try:
            course_model_file(progress=False)  # your own file: there, and a model the course can load
        except PretrainedError as err:
            return Item("the course's model", False, str(err))
        return Item("the course's model", True, f"${MODEL_ENV}={own}, a model the course loads")
    for path in (repository_copy(), cached_copy()):
        if path.is_file():
            ok = sha256_file(path) == COURSE_MODEL_SHA256
            return Item(
                "the course's model",
                ok,
                f"{_shown(path)}, " + ("checksum verified" if ok else "corrupt: wrong SHA-256"),
            )
    return Item("the course's model", False, "not found (it would be downloaded)")


def _quick_item() -> Item:
    run = default_out_dir(QUICK_RUN)
    try:
        bleu = json.loads((run / "metrics.json").read_text(encoding="utf-8"))["test_2016_flickr"]["bleu"]
    except (OSError, ValueError, KeyError, TypeError):
        return Item(
            "the quick model",
            False,
            f"not trained yet in {run}: notebook 10 trains it (about two minutes)",
            needed=False,
        )
    return Item("the quick model", True, f"{run} (test BLEU {bleu:.2f}): notebook 10 loads it", needed=False)


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def course_folder() -> Path:
    """The course folder holding the current directory: the one to prepare; a ClassroomError outside one."""
    root = course_root()
    if root is None:
        raise ClassroomError(
            f"{Path.cwd()} is not inside a course folder (a copy of the course, with its pyproject.toml): "
            f"{PREPARE_COMMAND} prepares the folder it runs in; cd into it first"
        )
    return root


def classroom_cache_dir() -> Path:
    """``classroom/cache`` of the course folder (created)."""
    cache = course_folder() / CLASSROOM_CACHE
    cache.mkdir(parents=True, exist_ok=True)
    return cache


@contextlib.contextmanager
def _using_cache(cache: Path) -> Iterator[None]:
    """The package's cache is ``cache`` and no data folder is set, for the duration (every step writes there)."""
    saved = {name: os.environ.get(name) for name in (CACHE_ENV, DATA_ENV)}
    os.environ[CACHE_ENV] = str(cache)
    os.environ.pop(DATA_ENV, None)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _shown(path: Path) -> str:
    """``path`` relative to the course folder when it is inside it (shorter, and the same on every machine)."""
    root = course_root()
    try:
        return str(path.resolve().relative_to(root)) if root is not None else str(path)
    except ValueError:
        return str(path)


def _cache_shown() -> str:
    env = os.environ.get(CACHE_ENV, "").strip()
    return f"{cache_dir()} (${CACHE_ENV})" if env else _shown(cache_dir())


def _write_readme(folder: Path) -> None:
    text = (
        "# classroom/\n\n"
        f"Made by `{PREPARE_COMMAND}` (`make classroom`): everything the notebooks would otherwise fetch.\n"
        "`cache/` is the package's cache for this course folder (Multi30k, checked against its SHA-256, and its\n"
        "tokens); `wheels/`, when there, every Python package for an offline `make learn`. Copy the whole course\n"
        f"folder to each learner's machine; `{PREPARE_COMMAND} --check` says whether one is ready.\n"
        'See docs/teaching.md, "A room without network". Git ignores this folder.\n'
    )
    atomic_write(folder / "README.md", lambda tmp: tmp.write_text(text, encoding="utf-8"))
