"""Training on several processes (transformer_lessons.distributed), on CPU with gloo.

The multi-process tests start real ``torchrun`` groups of two processes (a few
seconds each): one DDP step equals the one-process step on the same batch, and a
run started, stopped and resumed with the command line trains and records
``world_size``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from transformer_lessons.data import make_batch
from transformer_lessons.ddp_demo import criterion, fresh_model, global_batch, one_process_step, one_step
from transformer_lessons.distributed import (
    AgreedStepBoundary,
    Distributed,
    from_environment,
    lost_connection,
    lost_rank_message,
    shard_batch,
)
from transformer_lessons.errors import TrainingError
from transformer_lessons.interrupt import StopRequested
from transformer_lessons.specials import BOS_ID, EOS_ID, PAD_ID

ROOT = Path(__file__).resolve().parent.parent


def _torchrun(*args: str, cwd: Path = ROOT, timeout: int = 600) -> subprocess.CompletedProcess:
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


# --- one process: shards, the environment, the stop signal -------------------------------------------------


def test_shards_cover_the_batch_once_in_order():
    batch = global_batch()  # 5 pairs
    for world in (1, 2, 3):
        parts = [shard_batch(batch, r, world, PAD_ID) for r in range(world)]
        assert torch.equal(torch.cat([p.src for p in parts]), batch.src)
        assert torch.equal(torch.cat([p.tgt_out for p in parts]), batch.tgt_out)
        assert torch.equal(torch.cat([p.tgt_mask for p in parts]), batch.tgt_mask)
        assert sum(p.n_tokens for p in parts) == batch.n_tokens
        assert [len(p) for p in parts] == [len(t) for t in torch.tensor_split(torch.arange(5), world)]
    assert (
        shard_batch(batch, 0, 2, PAD_ID).n_tokens != shard_batch(batch, 1, 2, PAD_ID).n_tokens
    )  # what ShardedLoss must weigh


def test_a_rank_without_sentences_gets_a_row_that_scores_nothing():
    batch = make_batch([([5, 6], [7])], PAD_ID, BOS_ID, EOS_ID)  # one pair, two ranks
    empty = shard_batch(batch, 1, 2, PAD_ID)
    assert len(empty) == 1 and empty.n_tokens == 0 and bool((empty.tgt_out == PAD_ID).all())
    assert criterion()(torch.randn(1, empty.tgt_out.size(1), 40), empty.tgt_out, reduction="sum").item() == 0.0
    with pytest.raises(ValueError, match="rank"):
        shard_batch(batch, 2, 2, PAD_ID)


def test_one_process_is_left_as_it_was(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    single = from_environment()
    assert (single.rank, single.world_size, single.active, single.is_main) == (0, 1, False, True)
    model, batch = fresh_model(), global_batch()
    assert single.wrap(model) is model and single.shard(batch, PAD_ID) is batch
    state = torch.get_rng_state()
    single.seed_step(0, 5)
    assert torch.equal(torch.get_rng_state(), state)  # one process keeps its one random stream
    assert single.agree(3, 0) == [3, 0] and single.stop_here(True, single.step_boundary()) is True


@pytest.mark.parametrize(
    "env, message",
    [
        ({"WORLD_SIZE": "2", "RANK": "2"}, "do not fit together"),
        ({"WORLD_SIZE": "two"}, "unreadable"),
    ],
)
def test_a_broken_environment_is_named(monkeypatch, env, message):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(TrainingError, match=message):
        from_environment()


def test_ranks_draw_different_dropout_and_repeat_it():
    draws = []
    for rank in (0, 1, 0):
        Distributed(rank=rank, world_size=2).seed_step(7, 12)
        draws.append(torch.rand(4))
    assert torch.equal(draws[0], draws[2]) and not torch.equal(draws[0], draws[1])


def test_the_agreed_boundary_notes_a_signal_and_stops_at_once_on_a_second_in_a_step():
    guard = AgreedStepBoundary()
    guard._handle(signal.SIGINT, None)  # outside a step: noted, nothing raised (the other ranks would wait forever)
    assert guard.pending == signal.SIGINT
    with pytest.raises(StopRequested) as stop:
        with guard.step():
            guard._handle(signal.SIGINT, None)  # a second Ctrl-C during a step
    assert stop.value.mid_step


# --- two processes ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("ddp") / "step.pt"
    result = _torchrun("-m", "transformer_lessons.ddp_demo", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(out)


def test_one_ddp_step_is_the_one_process_step_on_the_same_batch(two_ranks):
    assert (two_ranks["world_size"], two_ranks["backend"]) == (2, "gloo")
    model, loss = one_process_step()
    assert two_ranks["loss"] == pytest.approx(loss.item(), rel=1e-6)
    for name, p in model.named_parameters():
        torch.testing.assert_close(two_ranks["grads"][name], p.grad, rtol=1e-5, atol=1e-7, msg=name)
        torch.testing.assert_close(two_ranks["weights"][name], p.detach(), rtol=1e-5, atol=1e-7, msg=name)
    assert not torch.equal(
        two_ranks["weights"]["generator.weight"], fresh_model().generator.weight
    )  # the step did move it


def test_averaging_each_ranks_own_mean_would_be_a_different_step(two_ranks):
    """The test above can fail: the shards hold different token counts, and the naive average differs."""
    model = fresh_model()
    one_step(model, global_batch(), criterion())
    gaps = [(two_ranks["naive_grads"][n] - p.grad).abs().max().item() for n, p in model.named_parameters()]
    assert max(gaps) > 1e-3


def test_a_ctrl_c_on_one_rank_stops_every_rank_at_the_same_boundary(two_ranks):
    assert two_ranks["stopped_with"] == [int(signal.SIGINT)] * 2


def test_torchrun_trains_resumes_and_records_world_size(tmp_path):
    from test_train import toy_corpus

    corpus_file, out = tmp_path / "toy.json.gz", tmp_path / "run"
    toy_corpus().save(corpus_file)
    base = [
        "-m",
        "transformer_lessons",
        "train",
        "--preset",
        "quick",
        "--corpus",
        str(corpus_file),
        "--out",
        str(out),
        "--device",
        "cpu",
        "--quiet",
        "--beam",
        "1",
        "--bleu-val-limit",
        "8",
    ]
    first = _torchrun(*base, "--epochs", "2", "--max-steps", "3")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "stopped after 3 steps" in first.stdout and first.stdout.count("stopped after") == 1  # rank 0 alone speaks
    assert sorted(p.name for p in out.iterdir()) == [".run.lock", "history.json", "last.pt"]
    step3 = torch.load(out / "last.pt", weights_only=False)
    assert step3["step"] == 3

    second = _torchrun(*base, "--epochs", "2")
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.count("resuming") == 1 and "step 3" in second.stdout
    history = json.loads((out / "history.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    assert [h["epoch"] for h in history] == [1, 2] and {h["world_size"] for h in history} == {2}
    assert metrics["world_size"] == 2 and metrics["steps"] == history[-1]["step"] > 3
    assert (out / "best.pt").is_file() and (out / "test_hypotheses.txt").is_file()


GLOO_RESET = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:17313: Connection reset by peer. "
    "This is typically caused by a remote worker hanging or bugs in the application. Check the logs of the remote worker before "
    "reporting an error. GLHF!"
)  # what rank 0's all-reduce raised when rank 1 was killed (PyTorch 2.x, gloo)


def test_a_lost_rank_is_said_in_one_line():
    assert lost_connection(RuntimeError(GLOO_RESET)) and lost_connection(
        RuntimeError("... Connection closed by peer [::1]:5")
    )
    assert not lost_connection(RuntimeError("mat1 and mat2 shapes cannot be multiplied")) and not lost_connection(
        ValueError(GLOO_RESET)
    )
    assert lost_rank_message(Distributed(rank=0, world_size=2), RuntimeError(GLOO_RESET)) == (
        "the other process of this torchrun run (rank 1) stopped: rank 0 lost its connection to it (Read error [127.0.0.1]:17313: "
        "Connection reset by peer). Its own output above says why it stopped (an error, killed, out of memory); this process "
        "stopped too. Run the same command again to resume from the last save"
    )
    assert lost_rank_message(Distributed(rank=3, world_size=4), RuntimeError(GLOO_RESET)).startswith(
        "another process of this torchrun run stopped: rank 3"
    )


def test_when_one_rank_is_killed_the_other_says_so_in_one_line(tmp_path):
    from test_train import toy_corpus

    corpus_file, out, logs = tmp_path / "toy.json.gz", tmp_path / "run", tmp_path / "logs"
    toy_corpus({"train": 3000, "val": 20, "test_2016_flickr": 20}).save(corpus_file)  # epochs of a few seconds
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "--log-dir",
        str(logs),
        "--redirects",
        "3",
        "-m",
        "transformer_lessons",
        "train",
        "--preset",
        "quick",
        "--corpus",
        str(corpus_file),
        "--out",
        str(out),
        "--device",
        "cpu",
        "--quiet",
        "--epochs",
        "50",
        "--no-test",
    ]
    torchrun = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while (
            not list(logs.glob("*/attempt_0/0/stdout.log"))
            or "epoch   1" not in next(logs.glob("*/attempt_0/0/stdout.log")).read_text()
        ):
            assert torchrun.poll() is None and time.monotonic() < deadline, "the run should be training"
            time.sleep(0.5)
        ranks = {}  # rank -> pid, from the environment torchrun gave each of its processes
        for pid in subprocess.run(["pgrep", "-P", str(torchrun.pid)], capture_output=True, text=True).stdout.split():
            environ = dict(
                v.split(b"=", 1) for v in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in v
            )
            ranks[int(environ[b"RANK"])] = int(pid)
        os.kill(ranks[1], signal.SIGKILL)  # rank 1 dies in the middle of an epoch, without a word
        torchrun.communicate(timeout=120)
    finally:
        if torchrun.poll() is None:
            torchrun.kill()
    assert torchrun.returncode != 0
    survivor = next(logs.glob("*/attempt_0/0/stderr.log")).read_text()
    assert survivor.startswith(
        "error: the other process of this torchrun run (rank 1) stopped: rank 0 lost its connection to it ("
    ), survivor
    assert survivor.count("\n") == 1 and "[rank0]" not in survivor and "Traceback" not in survivor, survivor
    assert (out / "last.pt").is_file(), "the epochs saved before are kept"
