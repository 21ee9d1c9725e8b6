"""The course's trained German→English translator: found on disk, or downloaded once.

The repository commits the model that ``train --preset cpu`` trained, exported in
float16 (:func:`~transformer_lessons.checkpoint.export_for_inference`), as
:data:`COURSE_MODEL_PATH`, with its ``metrics.json`` and ``history.json`` beside it.
:func:`course_model_file` looks for it, in order:

1. ``$TRANSFORMER_LESSONS_MODEL``: a model file of your own, used as it is;
2. the repository copy, when the package runs from a clone (an editable install);
3. the cache, ``<cache_dir()>/models/model_fp16.pt``;
4. the internet: the raw file of the repository on GitHub, saved into the cache.

Every copy but your own must have the SHA-256 :data:`COURSE_MODEL_SHA256`: a
partial checkout or a Git LFS pointer is reported, never loaded, and a damaged
cached copy is downloaded again. The repository's address is not written here: it
is read from ``[project.urls] Repository`` in ``pyproject.toml`` (through the
installed package's metadata), its one home.

Example::

    from transformer_lessons.pretrained import load_course_model

    course = load_course_model()
    print(course.describe())
    print(course.translate("Ein Mann fährt Fahrrad."))
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import posixpath
import re
import urllib.error
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer_lessons.data.files import _CacheWriteError, _download, cache_dir, sha256_file
from transformer_lessons.translation import translate
from transformer_lessons.errors import CheckpointError, DataError
from transformer_lessons.checkpoint import load_checkpoint

COURSE_MODEL_PATH = "results/cpu_dropout/model_fp16.pt"  # inside the repository, '/'-separated
COURSE_MODEL_SHA256 = "5feed4c2250475616904586659d2b14c06cc36c3f14db39b67e7ad78db177a1e"  # of the committed file; equals results/cpu_dropout/model_fp16.pt.sha256
COMPANION_FILES = ("metrics.json", "history.json")  # beside the model, in the repository and in the cache
MODEL_ENV = "TRANSFORMER_LESSONS_MODEL"  # a model file of your own, used instead of the course's
DISTRIBUTION = "transformer-lessons"  # the package's name in its metadata
RAW_HOST = "https://raw.githubusercontent.com"
BRANCH = "main"
CHECKOUT = Path(__file__).resolve().parents[1]  # the clone, when the package runs from one
TRAIN_YOUR_OWN = "python -m transformer_lessons train --preset quick"


class PretrainedError(DataError):
    """The course's model cannot be found, downloaded or trusted; the message says what to do."""


# --------------------------------------------------------------------------------------
# Where the model lives
# --------------------------------------------------------------------------------------


def repository_url() -> str:
    """``[project.urls] Repository``: from the installed metadata, else ``pyproject.toml`` in the clone."""
    try:
        for entry in importlib.metadata.metadata(DISTRIBUTION).get_all("Project-URL") or []:
            label, _, url = entry.partition(",")
            if label.strip().lower() == "repository" and url.strip():
                return url.strip().rstrip("/")
    except importlib.metadata.PackageNotFoundError:
        pass
    pyproject = CHECKOUT / "pyproject.toml"
    if pyproject.is_file():
        text = pyproject.read_text(encoding="utf-8")
        try:
            import tomllib  # Python >= 3.11

            url = tomllib.loads(text).get("project", {}).get("urls", {}).get("Repository")
        except ModuleNotFoundError:  # Python 3.10: the one entry, by hand
            urls = re.search(r"^\[project\.urls\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
            found = re.search(r'^Repository\s*=\s*"([^"]+)"', urls[1], re.M) if urls else None
            url = found[1] if found else None
        if url:
            return url.rstrip("/")
    raise PretrainedError(
        f"cannot tell where the course's model is published: the package metadata of {DISTRIBUTION} and "
        f"{pyproject} give no [project.urls] Repository. Reinstall the package, or set {MODEL_ENV}=<a model file>."
    )


def raw_url(rel_path: str) -> str:
    """The address of the file ``rel_path`` of the repository's ``main`` branch, as raw bytes."""
    repository = repository_url()
    match = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?", repository)
    if not match:
        raise PretrainedError(
            f"the course's model is downloaded from GitHub, but [project.urls] Repository is {repository!r}, "
            f"not a GitHub repository address; set {MODEL_ENV}=<a model file> instead."
        )
    return f"{RAW_HOST}/{match[1]}/{match[2]}/{BRANCH}/{rel_path}"


def repository_copy() -> Path:
    """Where the committed model is in a clone of the repository (it may not exist)."""
    return CHECKOUT / COURSE_MODEL_PATH


def cached_copy() -> Path:
    """Where the downloaded model is kept: ``<cache_dir()>/models/model_fp16.pt``."""
    return cache_dir() / "models" / posixpath.basename(COURSE_MODEL_PATH)


def _companion_url(name: str) -> str:
    return raw_url(posixpath.join(posixpath.dirname(COURSE_MODEL_PATH), name))


# --------------------------------------------------------------------------------------
# Finding, checking and downloading
# --------------------------------------------------------------------------------------


def course_model_file(progress: bool = True) -> Path:
    """The path of a trustworthy copy of the course's model, downloading it if needed.

    The order: ``$TRANSFORMER_LESSONS_MODEL`` (your own file, not checked), the
    repository copy, the cache, the internet (see the module docstring).

    Args:
        progress: show a progress bar while downloading.

    Raises:
        PretrainedError: ``$TRANSFORMER_LESSONS_MODEL`` names no file; the
            repository copy is corrupt; the download failed (offline) and no copy
            is cached; or the downloaded bytes are not the course's model.
    """
    own = os.environ.get(MODEL_ENV, "").strip()
    if own:
        path = Path(own).expanduser()
        if not path.is_file():
            raise PretrainedError(
                f"{MODEL_ENV}={own} but there is no file there; point it at a model file, or unset it to use the course's model."
            )
        try:  # a plain state_dict, another project's file: said here, naming the variable, not later by its reader
            load_checkpoint(path, "cpu")
        except CheckpointError as err:
            raise PretrainedError(
                f"{MODEL_ENV}={own}: {err}; point it at a model the course saved (a run's best.pt, or "
                "export_for_inference's file), or unset it to use the course's model"
            ) from err
        return path

    path = repository_copy()
    if path.is_file():
        _check_repository_copy(path)
        return path

    path = cached_copy()
    if path.is_file():
        actual = sha256_file(path)
        if actual == COURSE_MODEL_SHA256:
            return path
        warnings.warn(
            f"cached {path} is not the course's model (SHA-256 {actual}, expected {COURSE_MODEL_SHA256}: damaged, "
            f"or from another version of the package); deleting it and downloading again",
            stacklevel=2,
        )
        path.unlink()
    return _download_model(path, progress)


def _check_repository_copy(path: Path) -> None:
    actual = sha256_file(path)
    if actual == COURSE_MODEL_SHA256:
        return
    with open(path, "rb") as f:
        lfs = f.read(64).startswith(b"version https://git-lfs")
    why = (
        "it is a Git LFS pointer, not the model (run: git lfs pull)"
        if lfs
        else "a partial checkout, or an edited or re-exported file"
    )
    raise PretrainedError(
        f"{path} is corrupt: its SHA-256 is {actual}, expected {COURSE_MODEL_SHA256} ({why}). It was not used. "
        f"Restore it with: git checkout -- {COURSE_MODEL_PATH}; or delete it, and the course's copy is downloaded; "
        f"to use a model you exported yourself, set {MODEL_ENV}=<its path>."
    )


def _download_model(path: Path, progress: bool) -> Path:
    url = raw_url(COURSE_MODEL_PATH)
    for name in COMPANION_FILES:  # they describe the model they came with: fetched again with the new one
        (path.parent / name).unlink(missing_ok=True)
    try:
        actual = _download(url, path, progress)
    except _CacheWriteError as err:  # the disk, not the network
        raise PretrainedError(
            f"could not save the course's model in {path.parent} ({err.err}). Make that directory writable, set "
            f"TRANSFORMER_LESSONS_CACHE to a writable directory, or download {url} by hand and set {MODEL_ENV}=<that file>."
        ) from err.err
    except OSError as err:  # the network: URLError/HTTPError, timeouts, resets
        reason = (
            f"HTTP {err.code} {err.reason}"
            if isinstance(err, urllib.error.HTTPError)
            else getattr(err, "reason", None) or err
        )
        raise PretrainedError(
            f"could not download the course's model from {url} ({reason}). Connect to the internet and try again; "
            f"or download that file by hand and put it at {path} (or anywhere, and set {MODEL_ENV}=<that file>); "
            f"or train your own: {TRAIN_YOUR_OWN}"
        ) from err
    if actual != COURSE_MODEL_SHA256:
        path.unlink(missing_ok=True)
        raise PretrainedError(
            f"the file downloaded from {url} has SHA-256 {actual}, expected {COURSE_MODEL_SHA256}; it was not kept. "
            f"Try again later; if it persists, the published model no longer matches this version of the package: "
            f"update the package, or train your own: {TRAIN_YOUR_OWN}"
        )
    _fetch_companions(path)
    return path


def _fetch_companions(path: Path) -> None:
    """Download the missing ``metrics.json`` / ``history.json`` beside a cached model; failures are ignored."""
    for name in COMPANION_FILES:
        if not (path.parent / name).is_file():
            try:
                _download(_companion_url(name), path.parent / name, progress=False)
            except (OSError, _CacheWriteError, PretrainedError):
                pass  # the model is what matters; these only describe it


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------------------
# Loading and describing
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class CourseModel:
    """The course's translator, ready to use, with the record of its training."""

    model: Any  # the Transformer, in eval mode
    src_vocab: Any  # German Vocab
    tgt_vocab: Any  # English Vocab
    info: dict  # the checkpoint's other entries (train_config, step, epoch, history, path, ...)
    metrics: dict | None  # metrics.json: test BLEU with its signature, the run's time and device; None if unavailable
    history: list | None  # history.json: one dict per epoch (losses, validation BLEU); None if unavailable
    path: Path  # the file it was loaded from

    def describe(self) -> str:
        """One line saying which model this is (see :func:`describe`)."""
        return describe(self.path, self.metrics)

    def translate(self, sentences, beam_size: int = 4, **kwargs):
        """:func:`transformer_lessons.translation.translate` with this model and its vocabularies."""
        return translate(
            self.model, sentences, beam_size=beam_size, src_vocab=self.src_vocab, tgt_vocab=self.tgt_vocab, **kwargs
        )


def load_course_model(device=None, progress: bool = True) -> CourseModel:
    """Find (or download) the course's model and load it, with its metrics and history.

    Args:
        device: where the model goes (default: CUDA if available, else CPU).
        progress: show a progress bar while downloading.

    Returns:
        A :class:`CourseModel`; the model is in eval mode, in float32.

    Raises:
        PretrainedError: as :func:`course_model_file`.
        CheckpointError: the file is not a loadable checkpoint (your own file, say).
    """
    path = course_model_file(progress)
    if path == cached_copy():
        _fetch_companions(path)  # when an earlier download of them failed, or the model was put there by hand
    model, src_vocab, tgt_vocab, info = load_checkpoint(path, device)  # torch.load(weights_only=True)
    metrics, history = (_read_json(path.parent / name) for name in COMPANION_FILES)
    return CourseModel(model, src_vocab, tgt_vocab, info, metrics, history, path)


def describe(path: str | os.PathLike, metrics: dict | None = None) -> str:
    """One line naming a model file: ``the course's model results/cpu_dropout/model_fp16.pt (sha256 1a2b3c4d…, test BLEU 31.20)``.

    "the course's model" only when the bytes are the course's (their SHA-256);
    the test BLEU comes from ``metrics`` (default: ``metrics.json`` beside the file). That score is the
    float32 model's; when ``other_tests.json`` beside the file scores the file itself (16-bit weights) and the two
    differ, the line gives both: ``test BLEU 41.68 in float32; this file: 41.66``.
    """
    path = Path(path)
    sha = sha256_file(path)
    shown = path
    for base in (Path.cwd(), CHECKOUT):  # short and machine-independent: relative to here, else to the clone
        try:
            shown = path.resolve().relative_to(base.resolve())
            break
        except ValueError:
            continue
    details = [f"sha256 {sha[:8]}…"]
    metrics = metrics if metrics is not None else _read_json(path.parent / COMPANION_FILES[0])
    bleu = metrics.get("test_2016_flickr", {}).get("bleu") if isinstance(metrics, dict) else None
    if isinstance(bleu, (int, float)):
        details.append(f"test BLEU {bleu:.2f}")
        # metrics.json scores the float32 model; other_tests.json (in a clone) may score this very file
        other = _read_json(path.parent / "other_tests.json")
        own = other.get("scores", {}).get("test_2016_flickr", {}).get("bleu") if isinstance(other, dict) else None
        named = Path(str(other.get("checkpoint", ""))).name if isinstance(other, dict) else ""
        if named == path.name and isinstance(own, (int, float)) and f"{own:.2f}" != f"{bleu:.2f}":
            details[-1] += f" in float32; this file: {own:.2f}"
    owner = "the course's model " if sha == COURSE_MODEL_SHA256 else ""
    return f"{owner}{shown} ({', '.join(details)})"
