"""A training run never loses work and never records something untrue.

Divergence, two runs in one folder, a resumed run with other settings, Ctrl-C and
SIGTERM, a full disk, damaged or malicious checkpoints, nonsense settings: each
is provoked here on the toy corpus of test_train.py and must give a clear answer
with nothing lost.
"""

from __future__ import annotations

import errno
import math
import os
import re
import signal
from pathlib import Path

import pytest
import torch

import transformer_lessons.run as training_run
import transformer_lessons.train as training
from transformer_lessons.atomic import atomic_write, temporary_name
from transformer_lessons.checkpoint import load_checkpoint, read_checkpoint, save_checkpoint
from transformer_lessons.config import TrainConfig
from transformer_lessons.decode import beam_search
from transformer_lessons.errors import CheckpointError, DivergedError, ResumeMismatchError, RunInUseError, TrainingError
from transformer_lessons.loss import LabelSmoothingLoss
from transformer_lessons.rundir import run_lock
from transformer_lessons.run import train

from test_train import TOY_CONFIG, toy_corpus

TIMING = ("tokens_per_s", "epoch_time_s", "elapsed_s")  # wall-clock figures: the only ones allowed to differ


@pytest.fixture(scope="module")
def corpus():
    return toy_corpus({"train": 300, "val": 20, "test_2016_flickr": 20})


def run(corpus, out, config=TOY_CONFIG.replace(epochs=2), **kwargs):
    return train(config, corpus, out_dir=out, device="cpu", progress=False, evaluate_test=False, **kwargs)


def weights(path: Path) -> dict:
    return torch.load(path, weights_only=True)["model"]


def without_timing(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in h.items() if k not in TIMING} for h in history]


# --------------------------------------------------------------------------------------
# Divergence
# --------------------------------------------------------------------------------------


def test_a_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, corpus, monkeypatch):
    first = run(corpus, tmp_path, TOY_CONFIG.replace(epochs=1))
    good = weights(tmp_path / "last.pt")
    steps_per_epoch = first["step"]
    real_forward = LabelSmoothingLoss.forward
    calls = {"n": 0}

    def nan_at_third_step(self, logits, target, reduction="mean"):
        loss = real_forward(self, logits, target, reduction)
        if self.training:  # training steps only, not the validation loss
            calls["n"] += 1
            if calls["n"] == 3:
                return loss * float("nan")
        return loss

    monkeypatch.setattr(LabelSmoothingLoss, "forward", nan_at_third_step)
    with pytest.raises(
        DivergedError, match=rf"diverged at step {steps_per_epoch + 3} \(learning rate [0-9.e-]+\): the loss is nan"
    ):
        run(corpus, tmp_path, TOY_CONFIG.replace(epochs=2))
    saved = read_checkpoint(tmp_path / "last.pt")
    assert saved["step"] == steps_per_epoch, "nothing is saved after the bad step"
    assert all(torch.equal(good[k], saved["model"][k]) for k in good)
    model, *_ = load_checkpoint(tmp_path / "last.pt", device="cpu")
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))


def test_train_step_leaves_the_weights_alone_on_a_non_finite_gradient():
    from transformer_lessons.copy_task import copy_training_batch, make_copy_model

    model = make_copy_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch = copy_training_batch(8, 6, model.src_vocab_size, torch.Generator().manual_seed(0))
    criterion = LabelSmoothingLoss(model.tgt_vocab_size, 1, 0.0)

    def inf_gradient(logits, target, reduction="mean"):
        return (
            LabelSmoothingLoss.forward(criterion, logits, target)
            * torch.tensor(1e38)
            * torch.tensor(1e38)
            / torch.tensor(1e38)
        )

    with pytest.raises(DivergedError):
        training.train_step(model, batch, inf_gradient, optimizer, clip_norm=1.0)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_load_checkpoint_refuses_non_finite_weights(tmp_path, corpus):
    run(corpus, tmp_path, TOY_CONFIG.replace(epochs=1))
    ckpt = torch.load(tmp_path / "last.pt", weights_only=True)
    key = next(k for k, v in ckpt["model"].items() if v.is_floating_point())
    ckpt["model"][key][0] = float("nan")
    torch.save(ckpt, tmp_path / "nan.pt")
    with pytest.raises(CheckpointError, match=rf"NaN or infinite weights \({key}.*diverged"):
        load_checkpoint(tmp_path / "nan.pt", device="cpu")


def test_label_smoothing_stays_finite_when_the_pad_logit_is_minus_infinity():
    logits = torch.randn(2, 3, 7, requires_grad=True)
    masked = logits.clone()
    masked[..., 1] = float("-inf")  # a model that rules <pad> out completely
    target = torch.tensor([[2, 3, 1], [4, 1, 1]])
    loss = LabelSmoothingLoss(7, pad_id=1, smoothing=0.1)(masked, target)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()
    finite = LabelSmoothingLoss(7, pad_id=1, smoothing=0.1)(
        logits.detach().clone().index_fill(-1, torch.tensor([1]), -1e4), target
    )
    assert math.isclose(loss.item(), finite.item(), rel_tol=1e-5)


# --------------------------------------------------------------------------------------
# One run per folder, unique temporary names, a full disk
# --------------------------------------------------------------------------------------


def test_a_second_run_in_the_same_folder_is_refused(tmp_path, corpus, monkeypatch):
    import transformer_lessons.run as t

    monkeypatch.setattr(t, "prepare_corpus_for", lambda *a, **k: pytest.fail("refused before any data work"))
    with run_lock(tmp_path):
        with pytest.raises(RunInUseError, match=rf"pid {os.getpid()}.*writing to {tmp_path}.*another output folder"):
            train(TOY_CONFIG, None, out_dir=tmp_path, device="cpu", progress=False)
    result = run(corpus, tmp_path, TOY_CONFIG.replace(epochs=1))  # released: the folder is usable again
    assert result["stopped"] == "done"


def test_temporary_names_are_unique_and_a_failed_save_leaves_nothing(tmp_path, monkeypatch):
    names = {temporary_name(tmp_path / "last.pt") for _ in range(50)}
    assert len(names) == 50 and all(str(os.getpid()) in n.name for n in names)
    save_checkpoint({"old": torch.ones(2)}, tmp_path / "last.pt")

    def disk_full(obj, f, *args, **kwargs):
        Path(f).write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device", str(f))

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint({"new": torch.zeros(2)}, tmp_path / "last.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"], "the temporary file is removed"
    monkeypatch.undo()
    assert torch.equal(torch.load(tmp_path / "last.pt", weights_only=True)["old"], torch.ones(2)), (
        "the old file is whole"
    )
    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "x.txt", lambda tmp: (tmp.write_text("part"), (_ for _ in ()).throw(KeyboardInterrupt)))
    assert not (tmp_path / "x.txt").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


def test_an_export_on_a_full_disk_names_the_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    from transformer_lessons.checkpoint import CHECKPOINT_FORMAT, export_for_inference

    ckpt = {
        "format": CHECKPOINT_FORMAT,
        "version": 1,
        "model_config": {},
        "src_vocab": {},
        "tgt_vocab": {},
        "model": {"w": torch.ones(2)},
    }
    torch.save(ckpt, tmp_path / "best.pt")
    export_for_inference(tmp_path / "best.pt", tmp_path / "small.pt")
    before = (tmp_path / "small.pt").read_bytes()
    real_save = torch.save

    def full_disk(obj, f, *args, **kwargs):
        real_save(obj, f)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OSError) as info:
        export_for_inference(tmp_path / "best.pt", tmp_path / "small.pt")
    assert info.value.filename == str(tmp_path / "small.pt") and isinstance(info.value.__cause__, RuntimeError)
    assert re.match(
        r"could not be written, PyTorch's writer failed \(unexpected pos 704 vs 598\): most likely the disk is full "
        r"\(with the partial file removed, [0-9,]+ MB are free there\)\. Nothing was replaced \(the earlier small.pt is intact\); "
        r"free some space",
        info.value.strerror,
    ), info.value.strerror
    assert (tmp_path / "small.pt").read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "best.pt",
        "small.pt",
    ]
    monkeypatch.setattr(torch, "save", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("some other failure")))
    with pytest.raises(RuntimeError, match="some other failure"):  # not a write failure: left as it is
        save_checkpoint({}, tmp_path / "other.pt")


def test_the_next_run_removes_what_a_killed_save_left_and_nothing_else(tmp_path, corpus, capsys):
    import subprocess
    import sys

    run(corpus, tmp_path, max_steps=2)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])  # a process that has ended: its pid names a dead writer
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = tmp_path / f".last.pt.{dead.pid}.0badc0de.tmp"  # what a save killed mid-write leaves
        stale.write_bytes(b"PK" + bytes(2_000_000))
        kept = [
            tmp_path / f".best.pt.{alive.pid}.0123abcd.tmp",  # a writer still running
            tmp_path / ".last.pt.tmp",
            tmp_path / "notes.tmp",
            tmp_path / f".last.pt.{dead.pid}.xyz.tmp",  # not the writer's names
            tmp_path / "tensorboard" / f".events.{dead.pid}.0badc0de.tmp",  # not directly in the run folder
        ]
        for path in kept:
            path.parent.mkdir(exist_ok=True)
            path.write_text("keep me")
        capsys.readouterr()
        run(corpus, tmp_path, max_steps=3, log=True)
    finally:
        alive.kill()
        alive.wait()
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "temporary" in line]
    assert lines == [
        f"removed 1 temporary file(s) that a cut-off save left in {tmp_path} ({stale.name}; 2.0 MB); the checkpoints were not touched"
    ]
    assert not stale.exists() and all(path.read_text() == "keep me" for path in kept)
    assert read_checkpoint(tmp_path / "last.pt")["step"] == 3
    run(corpus, tmp_path, max_steps=4, log=True)  # the writer that was running has ended since
    out = capsys.readouterr().out
    assert f"removed 1 temporary file(s) that a cut-off save left in {tmp_path} ({kept[0].name}; 0.0 MB)" in out
    assert all(path.read_text() == "keep me" for path in kept[1:])


def test_an_output_folder_that_is_a_file_or_a_bad_device_is_refused_at_once(tmp_path, monkeypatch):
    import transformer_lessons.run as t

    monkeypatch.setattr(t, "prepare_corpus_for", lambda *a, **k: pytest.fail("refused before any data work"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(TrainingError, match="is a file"):
        train(TOY_CONFIG, None, out_dir=tmp_path / "file", device="cpu")
    with pytest.raises(ValueError, match="'gpu' is not a device"):
        train(TOY_CONFIG, None, out_dir=tmp_path / "a", device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="needs a CUDA GPU"):
            train(TOY_CONFIG, None, out_dir=tmp_path / "a", device="cuda")
    with pytest.raises(ValueError, match="max_steps must be a whole number >= 1"):
        train(TOY_CONFIG, None, out_dir=tmp_path / "a", device="cpu", max_steps=0)


# --------------------------------------------------------------------------------------
# Resume: the same run, or a clear refusal
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"seed": 1}, "seed: 0 -> 1"),
        ({"lr_factor": 0.9}, "lr_factor: 0.5 -> 0.9"),
        ({"max_tokens": 256}, "max_tokens: 128 -> 256"),
    ],
)
def test_resume_refuses_other_settings_and_names_them(tmp_path, corpus, change, named):
    run(corpus, tmp_path, TOY_CONFIG.replace(epochs=1))
    before = (tmp_path / "last.pt").read_bytes()
    with pytest.raises(
        ResumeMismatchError, match=rf"{named}.*only the epochs, the time limit and the evaluation.*no-resume"
    ):
        run(corpus, tmp_path, TOY_CONFIG.replace(epochs=2, **change))
    assert (tmp_path / "last.pt").read_bytes() == before, "the refused call wrote nothing"


def test_a_run_folder_without_last_pt_is_not_silently_replaced(tmp_path, corpus, monkeypatch):
    import transformer_lessons.run as t

    run(corpus, tmp_path, TOY_CONFIG.replace(epochs=1))
    (tmp_path / "last.pt").unlink()  # moved away, or only best.pt was copied
    before = {name: (tmp_path / name).read_bytes() for name in ("best.pt", "history.json")}
    with monkeypatch.context() as patch:
        patch.setattr(t, "prepare_corpus_for", lambda *a, **k: pytest.fail("refused before any data work"))
        with pytest.raises(TrainingError) as info:
            train(TOY_CONFIG, None, out_dir=tmp_path, device="cpu", progress=False)
    assert str(info.value) == (
        f"{tmp_path} holds best.pt and history.json of an earlier run but no last.pt to resume it from: a new run would replace them. "
        "Move them (or the folder) away, or give this run another output folder (out_dir=..., command line --out); "
        "to start over there and replace them, pass resume=False (command line --no-resume)"
    )
    assert {name: (tmp_path / name).read_bytes() for name in before} == before, "nothing lost"
    result = run(corpus, tmp_path, TOY_CONFIG.replace(epochs=1), resume=False)  # asked for: it starts over
    assert result["step"] > 0 and (tmp_path / "last.pt").is_file()


def test_resume_accepts_more_epochs_time_and_other_evaluation(tmp_path, corpus):
    run(corpus, tmp_path, TOY_CONFIG.replace(epochs=1))
    changed = TOY_CONFIG.replace(
        epochs=2, max_minutes=30.0, eval_every=2, beam_size=1, bleu_val_limit=5, max_output_extra=3, length_penalty=1.0
    )
    result = run(corpus, tmp_path, changed)
    assert [h["epoch"] for h in result["history"]] == [1, 2]
    assert read_checkpoint(tmp_path / "last.pt")["train_config"]["eval_every"] == 2


# --------------------------------------------------------------------------------------
# Ctrl-C and SIGTERM: the resumed run is the uninterrupted one
# --------------------------------------------------------------------------------------


def signal_during_step(monkeypatch, at: int, signum: int, times: int = 1):
    """Make the ``at``-th training step send itself ``signum`` in its middle (``times`` times)."""
    real = training_run.train_step
    calls = {"n": 0}

    def step(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == at:
            for _ in range(times):
                os.kill(os.getpid(), signum)
        return real(*args, **kwargs)

    monkeypatch.setattr(training_run, "train_step", step)


@pytest.fixture
def stop_signals_default():
    """Ctrl-C and SIGTERM as in a terminal or a notebook, whatever started the tests (make in the background ignores SIGINT)."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    for s, handler in before.items():
        signal.signal(s, handler)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_and_resumed_run_is_identical_to_the_uninterrupted_one(
    tmp_path, corpus, monkeypatch, signum, stop_signals_default
):
    straight = run(corpus, tmp_path / "a")
    steps_per_epoch = straight["history"][0]["step"]
    signal_during_step(monkeypatch, at=steps_per_epoch + 5, signum=signum)  # in the middle of epoch 2
    expected = KeyboardInterrupt if signum == signal.SIGINT else SystemExit
    with pytest.raises(expected) as stop:
        run(corpus, tmp_path / "b")
    if signum == signal.SIGTERM:
        assert stop.value.code == 128 + signal.SIGTERM
    saved = read_checkpoint(tmp_path / "b" / "last.pt")
    assert saved["step"] == steps_per_epoch + 5 and saved["batch_in_epoch"] == 5, (
        "the step in progress finished, then it saved"
    )
    monkeypatch.undo()
    resumed = run(corpus, tmp_path / "b")
    assert without_timing(resumed["history"]) == without_timing(straight["history"])
    a, b = weights(tmp_path / "a" / "last.pt"), weights(tmp_path / "b" / "last.pt")
    assert all(torch.equal(a[k], b[k]) for k in a), "weight for weight"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, "the handlers are given back"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_second_ctrl_c_stops_at_once_without_overwriting_last_pt(tmp_path, corpus, monkeypatch, stop_signals_default):
    run(corpus, tmp_path, TOY_CONFIG.replace(epochs=1))
    before = (tmp_path / "last.pt").read_bytes()
    signal_during_step(monkeypatch, at=3, signum=signal.SIGINT, times=2)
    with pytest.raises(KeyboardInterrupt):
        run(corpus, tmp_path, TOY_CONFIG.replace(epochs=2))
    assert (tmp_path / "last.pt").read_bytes() == before


def test_an_ignored_ctrl_c_stays_ignored(tmp_path, corpus, monkeypatch, stop_signals_default):
    """A run started in the background ('&') ignores Ctrl-C, as the shell meant: training does not take it over."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal_during_step(monkeypatch, at=3, signum=signal.SIGINT)
    result = run(corpus, tmp_path, TOY_CONFIG.replace(epochs=1))
    assert result["stopped"] == "done" and signal.getsignal(signal.SIGINT) is signal.SIG_IGN


# --------------------------------------------------------------------------------------
# Checkpoint messages, bounds, nonsense numbers
# --------------------------------------------------------------------------------------


class Malicious:
    def __reduce__(self):
        return (os.system, ("echo this should never run",))


def test_checkpoint_errors_say_what_the_file_is_not(tmp_path):
    (tmp_path / "empty.pt").write_bytes(b"")
    (tmp_path / "random.pt").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "lfs.pt").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 12\n")
    torch.save({"x": Malicious()}, tmp_path / "evil.pt")
    (tmp_path / "folder.pt").mkdir()
    cases = {
        "empty.pt": r"is empty \(0 bytes\)",
        "random.pt": r"is not a PyTorch checkpoint",
        "lfs.pt": r"is a Git LFS pointer",
        "evil.pt": r"asks to run code \((os|posix)\.system\).*refused",
        "folder.pt": r"is a folder, not a checkpoint file",
    }
    for name, message in cases.items():
        with pytest.raises(CheckpointError, match=message):
            load_checkpoint(tmp_path / name, device="cpu")


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"n_heads": 3}, r"d_model \(32\) must be divisible by n_heads \(3\)"),
        ({"positional": "banana"}, r"positional must be .*'banana'"),
    ],
)
def test_a_checkpoint_whose_config_builds_no_model_is_named(tmp_path, corpus, change, problem):
    ckpt = {
        "format": "transformer_lessons.checkpoint",
        "version": 1,
        "model_config": TOY_CONFIG.model.to_dict() | change,
        "src_vocab": corpus.src_vocab.to_dict(),
        "tgt_vocab": corpus.tgt_vocab.to_dict(),
        "model": {},
    }
    torch.save(ckpt, tmp_path / "odd.pt")
    with pytest.raises(
        CheckpointError,
        match=rf"^{re.escape(str(tmp_path / 'odd.pt'))}: its model config cannot build a model \({problem}.*\); the file is damaged.*train it again",
    ):
        load_checkpoint(tmp_path / "odd.pt", device="cpu")


def test_the_beam_is_bounded():
    from transformer_lessons.copy_task import make_copy_model

    model = make_copy_model().eval()
    with pytest.raises(ValueError, match="between 1 and 64"):
        beam_search(model, torch.tensor([[5, 6, 7]]), None, max_new_tokens=5, bos_id=2, eos_id=3, beam_size=10_000)


@pytest.mark.parametrize(
    "bad",
    [
        {"limit": 0},
        {"limit": -5},
        {"epochs": 0},
        {"bleu_val_limit": 0},
        {"max_minutes": float("nan")},
        {"max_minutes": -1.0},
        {"lr_factor": float("inf")},
        {"max_tokens": 0},
        {"beam_size": 65},
        {"eval_every": 0},
        {"seed": -1},
        {"smoothing": 1.0},
    ],
)
def test_nonsense_settings_are_refused(bad):
    field = next(iter(bad))
    with pytest.raises(ValueError, match=rf"TrainConfig: {field} must be"):
        TrainConfig(**bad)


def test_a_record_written_before_the_rename_still_reads():
    """``max_len`` of TrainConfig was renamed ``drop_longer_than`` (the name meant three things); old records still load."""
    import json

    recorded = json.loads((Path(__file__).resolve().parents[1] / "results" / "cpu" / "metrics.json").read_text())[
        "train_config"
    ]
    config = TrainConfig.from_dict(recorded)
    assert config.drop_longer_than == recorded.get("max_len", recorded.get("drop_longer_than"))
    assert TrainConfig.from_dict({"max_len": 40}).drop_longer_than == 40
