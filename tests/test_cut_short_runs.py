"""A run cut short where a classroom cuts it: a disk that fills in the first epoch, a kill while history.json is written.

- The first epoch saves ``best.pt`` and then ``last.pt``; a full disk between them left ``best.pt`` alone, and the
  advice "free some space and run the same command again" then met a refusal (a folder with an earlier run's
  records and no ``last.pt``). Now the same command removes that ``best.pt`` (this run's, epoch 1) and starts
  over, saying so; a ``best.pt`` of another run is still refused.
- ``last.pt`` is the record: a resumed run (a finished one too) writes ``history.json`` anew from it, so a kill
  while ``history.json`` was written no longer leaves it an epoch behind.
"""

from __future__ import annotations

import errno
import json

import pytest

import transformer_lessons.run_state as run_state
from test_train import TOY_CONFIG, toy_corpus
from transformer_lessons.errors import TrainingError
from transformer_lessons.run import train

CONFIG = TOY_CONFIG.replace(epochs=2, eval_every=1)


@pytest.fixture(scope="module")
def corpus():
    return toy_corpus()


def test_the_same_command_after_a_disk_full_in_the_first_epoch_starts_over(tmp_path, corpus, monkeypatch, capsys):
    real = run_state.save_checkpoint

    def full_disk_for_last_pt(ckpt, path):
        if path.name == "last.pt":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(ckpt, path)

    monkeypatch.setattr(run_state, "save_checkpoint", full_disk_for_last_pt)
    with pytest.raises(OSError, match="No space left"):
        train(CONFIG, corpus, out_dir=tmp_path, device="cpu", progress=False, evaluate_test=False)
    assert (tmp_path / "best.pt").is_file() and not (tmp_path / "last.pt").exists()

    # another run's settings: its best.pt is not this run's to remove
    with pytest.raises(TrainingError, match="holds best.pt of an earlier run but no last.pt"):
        train(CONFIG.replace(seed=1), corpus, out_dir=tmp_path, device="cpu", progress=False, evaluate_test=False)

    monkeypatch.setattr(run_state, "save_checkpoint", real)  # space freed
    capsys.readouterr()
    result = train(CONFIG, corpus, out_dir=tmp_path, device="cpu", progress=False, log=True, evaluate_test=False)
    assert result["stopped"] == "done" and len(result["history"]) == 2
    assert "the first epoch of this same run, saved without last.pt" in capsys.readouterr().out


def test_a_history_json_cut_short_is_written_anew_from_last_pt(tmp_path, corpus, capsys):
    first = train(CONFIG, corpus, out_dir=tmp_path, device="cpu", progress=False, evaluate_test=False)
    history = tmp_path / "history.json"
    assert len(json.loads(history.read_text())) == 2
    history.write_text(json.dumps(first["history"][:1]))  # killed while the last epoch's history was written
    again = train(CONFIG, corpus, out_dir=tmp_path, device="cpu", progress=False, log=True, evaluate_test=False)
    assert "already finished (2 epochs" in capsys.readouterr().out and again["step"] == first["step"]
    assert json.loads(history.read_text()) == json.loads(json.dumps(first["history"]))
