"""A read-only course folder (a shared lab install): a run names the way out, and a finished run is still shown.

The machine's tests run as root, who may write anywhere, so the folder's state is staged: ``os.access`` says
read-only, and the lock file's ``open`` raises the PermissionError a read-only folder gives.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from transformer_lessons import rundir, run
from transformer_lessons.config import TRAIN_PRESETS
from transformer_lessons.errors import TrainingError
from transformer_lessons.rundir import RUNS_ENV

WAY_OUT = f"give the run a folder you can write: out_dir=... in a notebook, --out DIR on the command line, or {RUNS_ENV}=<folder> for every run"


def _read_only(monkeypatch, folder: Path) -> None:
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if Path(path) == folder else real_access(path, mode))

    def refused(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(rundir, "open", refused, raising=False)  # the lock file: the first thing a run writes


def _finished_record(folder: Path, config) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    test = {"bleu": 17.5, "beam_size": 4, "n": 1000, "signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp"}
    metrics = {
        "train_config": json.loads(json.dumps(config.to_dict())),
        "stopped": "done",
        "steps": 120,
        "best_epoch": 3,
        "best_val_bleu": 15.1,
        "train_time_s": 80.0,
        "test_2016_flickr": test,
    }
    (folder / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    (folder / "history.json").write_text(
        json.dumps([{"epoch": e, "step": 40 * e} for e in (1, 2, 3)]), encoding="utf-8"
    )
    (folder / "last.pt").write_bytes(b"")  # present; never read on this path
    return metrics


def test_a_finished_run_in_a_read_only_folder_is_shown_from_its_record(tmp_path, monkeypatch, capsys):
    config = TRAIN_PRESETS["quick"]
    folder = tmp_path / "runs" / "quick"
    metrics = _finished_record(folder, config)
    _read_only(monkeypatch, folder)
    result = run.train(config, out_dir=folder, device="cpu")  # no corpus, no data: nothing is loaded
    assert result["test"] == metrics["test_2016_flickr"] and result["stopped"] == "done" and result["step"] == 120
    assert [h["epoch"] for h in result["history"]] == [1, 2, 3] and result["out_dir"] == str(folder)
    assert (
        capsys.readouterr().out
        == f"{folder} is read-only here and holds this run, finished: its record is shown as it is\n"
    )


def test_other_settings_in_a_read_only_folder_are_refused_with_the_way_out(tmp_path, monkeypatch):
    folder = tmp_path / "runs" / "quick"
    _finished_record(folder, TRAIN_PRESETS["quick"])
    _read_only(monkeypatch, folder)
    with pytest.raises(TrainingError) as error:
        run.train(TRAIN_PRESETS["quick"].replace(epochs=7), out_dir=folder, device="cpu", progress=False)
    message = str(error.value)
    assert message.startswith(f"cannot write in the run's folder {folder}: Permission denied") and WAY_OUT in message


def test_a_folder_that_cannot_be_made_names_the_way_out(tmp_path, monkeypatch):
    def refused(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", refused)
    with pytest.raises(TrainingError) as error:
        rundir.make_out_dir(tmp_path / "runs" / "quick")
    assert (
        str(error.value)
        == f"cannot create the output folder {tmp_path / 'runs' / 'quick'}: Permission denied; {WAY_OUT}"
    )


def test_the_command_line_says_it_in_one_line(tmp_path, monkeypatch, capsys):
    from transformer_lessons.__main__ import main

    # The default folder (no --out, which the parser would check itself): here $TRANSFORMER_LESSONS_RUNS/quick.
    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "runs"))
    folder = tmp_path / "runs" / "quick"
    folder.mkdir(parents=True)
    _read_only(monkeypatch, folder)
    assert main(["train", "--preset", "quick", "--device", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write in the run's folder") and WAY_OUT in err and len(err.splitlines()) == 1
