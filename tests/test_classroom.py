"""A classroom without network: the preparation, and what the notebooks then find.

The tests cut the network (``no_network``, in conftest.py, makes each socket
connect and name lookup fail, as on a machine with no network), and the
preparation copies Multi30k from the shared copy instead of downloading it.
``make offline-test`` does the rest for real: every notebook under nbval in a
network namespace that has only the loopback (scripts/offline.sh).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest

from transformer_lessons import classroom, data, pretrained
from transformer_lessons.__main__ import main
from transformer_lessons.data import corpus as corpus_module
from transformer_lessons.errors import DataError
from transformer_lessons.pretrained import MODEL_ENV, load_course_model
from transformer_lessons.rundir import RUNS_ENV

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get(data.DATA_ENV) or REPO.parent / "shared" / "data" / "multi30k")
needs_data = pytest.mark.skipif(
    not (DATA_DIR / "train.en.gz").is_file(),
    reason=f"Multi30k raw files not found in {DATA_DIR}: set {data.DATA_ENV} to a directory holding them",
)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture
def course(tmp_path, monkeypatch) -> Path:
    """An empty course folder (its pyproject.toml is what marks one) as the current directory; no variables set, HOME empty."""
    folder = tmp_path / "course"
    folder.mkdir()
    shutil.copyfile(REPO / "pyproject.toml", folder / "pyproject.toml")
    monkeypatch.chdir(folder)
    for name in (data.CACHE_ENV, data.DATA_ENV, RUNS_ENV, MODEL_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.cache to fall back on
    return folder.resolve()


def test_the_network_is_really_off(no_network):
    with pytest.raises(OSError, match="the network is off"):
        urllib.request.urlopen("https://pypi.org/simple/", timeout=5)


# ----------------------------------------------------------------------------- where the package looks


def test_a_prepared_course_folder_is_the_cache(course, monkeypatch):
    assert data.cache_dir() == Path.home() / ".cache" / "transformer_lessons"  # not prepared: the user's cache
    (course / "classroom" / "cache").mkdir(parents=True)
    assert data.cache_dir() == course / "classroom" / "cache"
    (course / "learner").mkdir()
    monkeypatch.chdir(course / "learner")  # where a notebook runs
    assert data.cache_dir() == course / "classroom" / "cache"
    monkeypatch.setenv(data.CACHE_ENV, str(course / "mine"))  # the variable still wins
    assert data.cache_dir() == course / "mine"


def test_outside_a_course_folder_the_command_says_where_to_run_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["classroom", "--no-train"]) == 2  # (--check works anywhere: it only looks)
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is not inside a course folder" in err and err.count("\n") == 1


# ----------------------------------------------------------------------------- preparing, then offline


@needs_data
def test_prepared_from_a_folder_every_notebook_path_works_offline(course, no_network, monkeypatch, capsys):
    said = []
    cache = classroom.prepare(DATA_DIR, quick_model=False, progress=False, say=said.append)
    assert cache == course / "classroom" / "cache"
    for name, digest in data.SHA256.items():
        assert data.sha256_file(cache / name) == digest, name
    assert said[0].startswith(f"Multi30k: 12 files, checksums verified, in {cache} (12 copied from {DATA_DIR})"), said
    assert (course / "classroom" / "README.md").is_file()

    # What the notebooks do, with nothing set: data from the folder, tokens from its cache (spaCy never runs again).
    def no_tokenizing(*args, **kwargs):
        raise AssertionError("tokenized again: the prepared tokens were not used")

    monkeypatch.setattr(data.Tokenizer, "tokenize_batch", no_tokenizing)
    assert data.fetch("train", "de") == cache / "train.de.gz"  # notebook 08
    assert len(data.load_split("test_2016_flickr", progress=False)) == 1000  # notebook 12
    corpus = corpus_module.prepare_corpus(
        min_freq=2, progress=False
    )  # notebook 08; 09, 10 and 13 through prepare_corpus_for
    assert len(corpus.pairs["train"]) == 29000
    course_model = load_course_model(device="cpu", progress=False)  # notebooks 11 and 12: the repository's copy
    assert course_model.metrics is not None
    assert data.example_pairs([8]) == [("Ein Typ arbeitet an einem Gebäude.", "A guy works on a building.")]

    items = {item.what: item for item in classroom.readiness()}
    assert all(item.ready for item in items.values() if item.needed), items
    assert items["tokenized splits"].ready and not items["the quick model"].ready  # quick_model=False
    assert main(["classroom", "--check"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("ready: every notebook runs on this machine without a network")

    # Run again: nothing to copy, nothing to tokenize (the cached tokens are read, as above).
    said.clear()
    classroom.prepare(DATA_DIR, quick_model=False, progress=False, say=said.append)
    assert said[0] == f"Multi30k: 12 files, checksums verified, in {cache}", said


def test_prepare_trains_the_quick_run_the_notebooks_resume(course, monkeypatch):
    calls = []

    def fake_train(config, **kwargs):
        calls.append((config, kwargs))
        return {"step": 7, "test": {"bleu": 12.5}}

    import transformer_lessons.run

    monkeypatch.setattr(transformer_lessons.run, "train", fake_train)
    said = []
    classroom.train_quick_model(progress=False, say=said.append)
    ((config, kwargs),) = calls
    # Notebook 10: train(get_train_config("quick"), out_dir=default_out_dir("quick"), resume=True); notebook 11 the same.
    assert (
        config == "quick"
        and kwargs["resume"] is True
        and Path(kwargs["out_dir"]).resolve() == course / "runs" / "quick"
    )
    assert said == ["the quick model: runs/quick, 7 updates, test BLEU 12.50"]


@needs_data
def test_a_corrupt_file_in_the_source_is_refused_and_not_copied(course, tmp_path, no_network):
    usb = tmp_path / "usb"
    shutil.copytree(DATA_DIR, usb)
    (usb / "val.en.gz").write_bytes((DATA_DIR / "val.en.gz").read_bytes()[:1000])
    with pytest.raises(DataError, match="val.en.gz is corrupt or truncated"):
        classroom.prepare(usb, quick_model=False, progress=False, say=lambda line: None)
    assert not (course / "classroom" / "cache" / "val.en.gz").exists()


def test_unprepared_and_offline_the_command_says_one_line_with_what_to_do(course, no_network, capsys):
    assert main(["classroom", "--no-train", "--quiet"]) == 2  # nothing to copy from, and no network to download with
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: train.de.gz (Multi30k) is not on this machine"), err
    assert "the network is off" in err and "python -m transformer_lessons classroom (make classroom)" in err


def test_check_on_an_unprepared_machine_lists_what_is_missing(course, capsys):
    assert main(["classroom", "--check"]) == 1
    out = capsys.readouterr().out
    assert "✘ Multi30k: 12 of 12 files missing or corrupt" in out
    shown = re.escape(pretrained.COURSE_MODEL_PATH)  # the committed model, wherever the record lives
    assert re.search(rf"✔ the course's model: \S*{shown}, checksum verified", out), out
    assert (
        out.rstrip()
        .splitlines()[-1]
        .startswith("not ready: Multi30k; run python -m transformer_lessons classroom here")
    )


# ----------------------------------------------------------------------------- the wheels


def test_wheels_are_this_environments_packages_with_pytorchs_own_index(course, monkeypatch, capsys):
    runs = []

    def fake_run(command, **kwargs):
        runs.append((command, kwargs))
        if command[3] == "freeze":
            return subprocess.CompletedProcess(command, 0, stdout="torch==2.13.0+cpu\nsacrebleu==2.6.0\n", stderr="")
        (course / "classroom" / "wheels").mkdir(parents=True)
        (course / "classroom" / "wheels" / "sacrebleu-2.6.0-py3-none-any.whl").write_bytes(b"x" * 1000)
        return subprocess.CompletedProcess(command, 0, stdout=None, stderr="")

    monkeypatch.setattr(classroom.subprocess, "run", fake_run)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # what the Makefile exports once classroom/wheels has wheels
    classroom.download_wheels()
    (freeze, _), (download, kwargs) = runs
    assert freeze[1:] == ["-m", "pip", "freeze", "--exclude-editable"]
    assert download[1:6] == ["-m", "pip", "download", "--quiet", "--dest"] and download[6] == str(
        course / "classroom" / "wheels"
    )
    assert {"pip", "setuptools>=77", "torch==2.13.0+cpu", "sacrebleu==2.6.0"} <= set(download)
    assert download[-2:] == ["--extra-index-url", "https://download.pytorch.org/whl/cpu"]  # PyPI has no +cpu build
    assert "PIP_NO_INDEX" not in kwargs["env"]  # downloading needs the index
    assert "Python packages: 1 files in classroom/wheels" in capsys.readouterr().out


def test_a_failed_download_of_the_wheels_ends_with_pips_reason(course, monkeypatch):
    def fake_run(command, **kwargs):
        if command[3] == "freeze":
            return subprocess.CompletedProcess(command, 0, stdout="torch==2.13.0\n", stderr="")
        return subprocess.CompletedProcess(
            command,
            1,
            stdout=None,
            stderr="Looking in indexes\nERROR: No matching distribution found for torch==2.13.0\n",
        )

    monkeypatch.setattr(classroom.subprocess, "run", fake_run)
    with pytest.raises(
        classroom.ClassroomError, match=r"\(exit status 1\): ERROR: No matching distribution found for torch==2.13.0$"
    ):
        classroom.download_wheels()


# ----------------------------------------------------------------------------- the Makefile and the network switch


def _make(*args: str, env: dict | None = None, cwd: Path = REPO) -> str:
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    env = {**os.environ, **(env or {})}
    done = subprocess.run(
        ["make", "--no-print-directory", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_learn_passes_the_data_folder_but_an_empty_one_leaves_the_shells():
    def lab_line(*args, env=None):
        lines = [line for line in _make("-n", *args, env=env).splitlines() if "transformer_lessons lab" in line]
        assert len(lines) == 1, lines
        return lines[0]

    for target in ("learn", "lab"):
        assert 'TRANSFORMER_LESSONS_DATA="/media/usb/multi30k"' in lab_line(target, "DATA=/media/usb/multi30k")
        assert "TRANSFORMER_LESSONS_DATA" not in lab_line(
            target, "DATA=", env={data.DATA_ENV: "/mine"}
        )  # inherited as it is
        assert 'TRANSFORMER_LESSONS_DATA="/mine"' in lab_line(target, env={data.DATA_ENV: "/mine"})


def test_a_folder_with_wheels_makes_pip_install_from_them_alone(tmp_path):
    shutil.copyfile(REPO / "Makefile", tmp_path / "Makefile")
    probe = 'probe: ; @echo "[$$PIP_NO_INDEX] [$$PIP_FIND_LINKS]"'
    env = {"PIP_NO_INDEX": "", "PIP_FIND_LINKS": ""}
    assert _make("--eval", probe, "probe", cwd=tmp_path, env=env).strip() == "[] []"
    (tmp_path / "classroom" / "wheels").mkdir(parents=True)
    (tmp_path / "classroom" / "wheels" / "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    assert (
        _make("--eval", probe, "probe", cwd=tmp_path, env=env).strip() == f"[1] [{tmp_path / 'classroom' / 'wheels'}]"
    )


def test_ci_runs_the_notebooks_offline():
    assert "make offline-test" in (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "\noffline-test: " in (REPO / "Makefile").read_text(encoding="utf-8")


def test_offline_script_leaves_only_the_loopback():
    code = textwrap.dedent(
        """
        import socket
        server = socket.create_server(("127.0.0.1", 0))
        socket.create_connection(server.getsockname(), timeout=5).close()  # Jupyter and torchrun need this
        try:
            socket.create_connection(("1.1.1.1", 53), timeout=5)
        except OSError as err:
            print("outside:", err.errno)
        """
    )
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "offline.sh"), sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0 and "unshare" in done.stderr:
        pytest.skip(f"this kernel allows no network namespace here: {done.stderr.strip()[-200:]}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "offline.sh: the network is off (loopback only)",
        f"outside: {errno.ENETUNREACH}",
    ]


def test_preparing_removes_one_persons_progress_from_the_shared_cache(tmp_path):
    cache = tmp_path / "classroom" / "cache"
    cache.mkdir(parents=True)
    (cache / "progress.json").write_text('{"version": 1, "exercises": {"noam_rate": {"status": "pass"}}}')
    (cache / "progress.json.lock").write_text("")
    said = []
    classroom.forget_progress(cache, said.append)
    assert not (cache / "progress.json").exists() and not (cache / "progress.json.lock").exists()
    assert said == [
        f"removed {cache / 'progress.json'}: one person's exercise verdicts, which every copy of the folder would show"
    ]
    classroom.forget_progress(cache, said.append)
    assert len(said) == 1, "nothing there: nothing said"


def test_check_does_not_call_a_plain_state_dict_under_the_model_variable_ready(course, monkeypatch):
    import torch

    own = course / "mine.pt"
    torch.save(torch.nn.Linear(2, 2).state_dict(), own)  # what torch.save(model.state_dict()) gives: no vocabularies
    monkeypatch.setenv(MODEL_ENV, str(own))
    item = next(i for i in classroom.readiness() if i.what == "the course's model")
    assert not item.ready and item.needed
    assert item.detail.startswith(f"{MODEL_ENV}={own}: ") and "unset it to use the course's model" in item.detail
