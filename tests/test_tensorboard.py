"""Tests of train(..., tensorboard=...): the optional extra, refused clearly without it, and what a run logs.

TensorBoard is not a dependency of the course: the missing package is simulated
with ``None`` in ``sys.modules`` (``import`` then raises ImportError), the logged
scalars are read from a fake ``SummaryWriter``, and the real one is tried only
where the extra is installed.
"""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest

import transformer_lessons.run as training_run
from test_train import TOY_CONFIG, toy_corpus
from transformer_lessons.errors import TrainingError
from transformer_lessons.schedule import noam_rate
from transformer_lessons.tensorboard import INSTALL_HINT, TensorBoardMissingError, tensorboard_dir
from transformer_lessons.run import train

CONFIG = TOY_CONFIG.replace(epochs=2, eval_every=2)  # validation BLEU on epoch 2 only


@pytest.fixture(scope="module")
def corpus():
    return toy_corpus({"train": 200, "val": 20, "test_2016_flickr": 10})


class FakeWriter:
    """Records what a ``SummaryWriter`` is given: ``scalars[tag] = [(step, value), ...]``."""

    made: list["FakeWriter"] = []

    def __init__(self, log_dir=None, purge_step=None):
        self.log_dir, self.purge_step, self.scalars, self.closed = log_dir, purge_step, {}, False
        FakeWriter.made.append(self)

    def add_scalar(self, tag, value, step):
        assert isinstance(value, float) and isinstance(step, int), (tag, value, step)
        self.scalars.setdefault(tag, []).append((step, value))

    def flush(self):
        pass

    def close(self):
        self.closed = True


@pytest.fixture
def fake_tensorboard(monkeypatch):
    FakeWriter.made = []
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=FakeWriter))
    return FakeWriter


def test_without_the_package_it_says_how_to_install_it_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if tensorboard were not installed
    monkeypatch.setattr(training_run, "prepare_corpus_for", lambda *a, **k: pytest.fail("refused before any data work"))
    monkeypatch.setattr(training_run, "make_out_dir", lambda *a, **k: pytest.fail("refused before the output folder"))
    for asked in (True, tmp_path / "tb", "tb"):
        with pytest.raises(TensorBoardMissingError) as err:
            train(TOY_CONFIG, None, out_dir=tmp_path / "run", device="cpu", progress=False, tensorboard=asked)
        message = str(err.value)
        assert (
            "\n" not in message
            and INSTALL_HINT in message
            and 'pip install "transformer-lessons[tensorboard]"' in message
        )
        assert isinstance(err.value, ImportError) and isinstance(err.value, TrainingError), "caught as either"
    assert not (tmp_path / "run").exists() and not (tmp_path / "tb").exists()
    with pytest.raises(TypeError, match="tensorboard must be None, True or a folder"):
        train(TOY_CONFIG, None, out_dir=tmp_path / "run", device="cpu", tensorboard=3)


def test_the_extra_is_declared_in_pyproject():
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    extra = pyproject["project"]["optional-dependencies"]["tensorboard"]
    assert len(extra) == 1 and extra[0].startswith("tensorboard>=")  # a range: the lock pins what make setup installs
    assert f'"{pyproject["project"]["name"]}[tensorboard]"' in INSTALL_HINT


def test_where_the_events_go(tmp_path):
    assert tensorboard_dir(None, tmp_path) is None and tensorboard_dir(False, tmp_path) is None
    assert tensorboard_dir(True, tmp_path) == tmp_path / "tensorboard"
    assert tensorboard_dir(str(tmp_path / "tb"), tmp_path) == tmp_path / "tb"


def test_a_run_logs_steps_epochs_and_the_test(tmp_path, corpus, fake_tensorboard):
    out = tmp_path / "run"
    result = train(CONFIG, corpus, out_dir=out, device="cpu", progress=False, tensorboard=True)
    (writer,) = fake_tensorboard.made
    assert writer.log_dir == str(out / "tensorboard") and writer.purge_step is None and writer.closed
    steps = result["step"]
    assert [s for s, _ in writer.scalars["train/loss"]] == list(range(1, steps + 1)), "one loss per update, at its step"
    model = CONFIG.model
    expected_lr = [noam_rate(k, model.d_model, CONFIG.warmup, CONFIG.lr_factor) for k in range(1, steps + 1)]
    assert [v for _, v in writer.scalars["train/lr"]] == pytest.approx(expected_lr), "the rate each update used"
    history = result["history"]
    for tag, key in (("epoch/train_loss", "train_loss"), ("val/loss", "val_loss"), ("val/ppl", "val_ppl")):
        assert writer.scalars[tag] == [(h["step"], pytest.approx(h[key])) for h in history], tag
    assert writer.scalars["val/bleu"] == [(history[1]["step"], pytest.approx(history[1]["val_bleu"]))], (
        "only where BLEU was computed"
    )
    assert writer.scalars["test/bleu"] == [(steps, pytest.approx(result["test"]["bleu"]))]
    assert "train/scheduled_sampling" not in writer.scalars, "teacher forcing: nothing to log"
    assert set(writer.scalars) == {
        "train/loss",
        "train/lr",
        "epoch/train_loss",
        "val/loss",
        "val/ppl",
        "val/bleu",
        "test/bleu",
    }


def test_a_resumed_run_continues_the_curves(tmp_path, corpus, fake_tensorboard):
    config = CONFIG.replace(scheduled_sampling=0.2)
    log_dir = tmp_path / "tb"
    first = train(
        config,
        corpus,
        out_dir=tmp_path / "run",
        device="cpu",
        progress=False,
        evaluate_test=False,
        max_steps=5,
        tensorboard=log_dir,
    )
    second = train(
        config,
        corpus,
        out_dir=tmp_path / "run",
        device="cpu",
        progress=False,
        evaluate_test=False,
        tensorboard=str(log_dir),
    )
    before, after = fake_tensorboard.made
    assert before.log_dir == after.log_dir == str(log_dir)
    assert before.purge_step is None and after.purge_step == first["step"] + 1 == 6, "what came after last.pt is purged"
    assert [s for s, _ in after.scalars["train/loss"]] == list(range(6, second["step"] + 1))
    assert [v for _, v in after.scalars["train/scheduled_sampling"]] == [0.2] * (second["step"] - 5)


@pytest.mark.skipif(
    importlib.util.find_spec("tensorboard") is None,
    reason='tensorboard is not installed (pip install "transformer-lessons[tensorboard]")',
)
def test_a_real_run_writes_an_events_file(tmp_path, corpus):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    result = train(
        CONFIG.replace(epochs=1),
        corpus,
        out_dir=out,
        device="cpu",
        progress=False,
        evaluate_test=False,
        tensorboard=True,
    )
    events = list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1 and events[0].stat().st_size > 0
    accumulator = EventAccumulator(str(out / "tensorboard"))
    accumulator.Reload()
    assert {"train/loss", "train/lr", "val/loss", "val/ppl", "val/bleu"} <= set(accumulator.Tags()["scalars"])
    assert [e.step for e in accumulator.Scalars("train/loss")] == list(range(1, result["step"] + 1))
