"""Tests of transformer_lessons.scheduled_sampling and of its use in the training loop.

The mixing is checked on a toy batch (never <bos>, never padding, the model's own
predictions, some tokens but not all); the loop on the toy corpus of test_train.py:
p = 0 is the old teacher forcing, p > 0 still learns and resumes weight for weight.
"""

from __future__ import annotations

import signal

import pytest
import torch

import transformer_lessons.run as training_run
from test_train import TOY_CONFIG, toy_corpus
from test_train_reliability import run, signal_during_step, stop_signals_default, weights, without_timing  # noqa: F401 (a fixture)
from transformer_lessons.checkpoint import read_checkpoint
from transformer_lessons.config import TrainConfig
from transformer_lessons.errors import ResumeMismatchError
from transformer_lessons.model import Transformer
from transformer_lessons.scheduled_sampling import (
    mix_inputs,
    model_predictions,
    scheduled_inputs,
    scheduled_probability,
    step_generator,
)

SCHEDULED = TOY_CONFIG.replace(epochs=2, scheduled_sampling=0.3, scheduled_sampling_ramp=20)


@pytest.fixture(scope="module")
def corpus():
    return toy_corpus({"train": 300, "val": 20, "test_2016_flickr": 20})


@pytest.fixture(scope="module")
def batch_and_model(corpus):
    """The first padded training batch of the toy corpus and an untrained model for its vocabularies."""
    batch = next(b for b in corpus.batcher("train", 256, shuffle=False) if (b.tgt_in == corpus.tgt_vocab.pad_id).any())
    torch.manual_seed(0)
    model = Transformer(TOY_CONFIG.model, len(corpus.src_vocab), len(corpus.tgt_vocab))
    return batch, model


# --------------------------------------------------------------------------------------
# The schedule and the two passes
# --------------------------------------------------------------------------------------


def test_the_probability_ramps_linearly_then_stays():
    assert [scheduled_probability(0.4, 10, s) for s in (0, 5, 10, 50)] == [0.0, 0.2, 0.4, 0.4]
    assert scheduled_probability(0.4, 0, 0) == 0.4, "no ramp: p from the first update"
    assert scheduled_probability(0.0, 10, 99) == 0.0


def test_the_generator_depends_on_seed_and_step_only():
    draw = lambda seed, step: torch.rand(5, generator=step_generator(seed, step))  # noqa: E731
    assert torch.equal(draw(0, 7), draw(0, 7))
    assert not torch.equal(draw(0, 7), draw(0, 8)) and not torch.equal(draw(0, 7), draw(1, 7))


def test_predictions_are_the_teacher_forced_argmax_in_eval_mode(batch_and_model):
    batch, model = batch_and_model
    model.train()
    predictions = model_predictions(model, batch)  # (B, T)
    assert model.training, "the model's mode comes back"
    model.eval()
    with torch.no_grad():
        expected = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask).argmax(-1)  # (B, T)
    model.train()
    assert predictions.shape == batch.tgt_in.shape and torch.equal(predictions, expected)
    sampled = model_predictions(model, batch, sample=True, generator=torch.Generator().manual_seed(0))
    assert sampled.shape == batch.tgt_in.shape and not torch.equal(sampled, predictions), (
        "sample=True draws from the softmax"
    )


def test_mixing_replaces_some_tokens_by_predictions_never_bos_or_padding(batch_and_model, corpus):
    batch, model = batch_and_model
    pad = corpus.tgt_vocab.pad_id
    before = batch.tgt_in.clone()
    mixed = scheduled_inputs(model, batch, 0.5, pad, generator=torch.Generator().manual_seed(0))
    assert torch.equal(batch.tgt_in, before), "the batch itself is not modified"
    assert mixed.tgt_out is batch.tgt_out and mixed.src is batch.src and mixed.tgt_mask is batch.tgt_mask, (
        "scored on the truth"
    )
    changed = mixed.tgt_in != batch.tgt_in  # (B, T)
    eligible = (batch.tgt_in != pad).clone()
    eligible[:, 0] = False
    assert changed.any() and changed.sum() < eligible.sum(), "some decoder inputs change, not all"
    assert not changed[:, 0].any() and (mixed.tgt_in[:, 0] == corpus.tgt_vocab.bos_id).all(), "<bos> stays"
    assert torch.equal(mixed.tgt_in[batch.tgt_in == pad], batch.tgt_in[batch.tgt_in == pad]), "padding stays padding"
    assert not (mixed.tgt_in[batch.tgt_in != pad] == pad).any(), "a predicted <pad> is never fed"
    predictions = model_predictions(model, batch)  # (B, T): predictions[:, t - 1] is the guess for tgt_in[:, t]
    guess = torch.cat([batch.tgt_in[:, :1], predictions[:, :-1]], dim=1)
    assert torch.equal(mixed.tgt_in[changed], guess[changed]), "a replaced token is the model's guess for that position"
    again = scheduled_inputs(model, batch, 0.5, pad, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again.tgt_in, mixed.tgt_in), "the same generator mixes the same tokens"


def test_the_share_of_replaced_tokens_follows_p():
    tgt_in = torch.full((200, 30), 5)
    tgt_in[:, 0] = 2
    predictions = torch.full((200, 30), 9)  # every guess differs from the truth
    for p in (0.1, 0.5):
        mixed = mix_inputs(tgt_in, predictions, p, pad_id=1, generator=torch.Generator().manual_seed(0))
        share = (mixed[:, 1:] == 9).float().mean().item()
        assert abs(share - p) < 0.02, (p, share)
    assert torch.equal(mix_inputs(tgt_in, predictions, 0.0, pad_id=1), tgt_in)


def test_p_zero_returns_the_batch_without_a_model_pass(batch_and_model):
    batch, _ = batch_and_model

    class NoPass(torch.nn.Module):
        def forward(self, *args):
            raise AssertionError("p = 0 must not run the model")

    state = torch.get_rng_state()
    assert scheduled_inputs(NoPass(), batch, 0.0, 1) is batch
    assert torch.equal(torch.get_rng_state(), state), "nor draw a random number"
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        scheduled_inputs(NoPass(), batch, 1.0, 1)


# --------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"scheduled_sampling": 1.0},
        {"scheduled_sampling": -0.1},
        {"scheduled_sampling": float("nan")},
        {"scheduled_sampling_ramp": -1},
        {"scheduled_sampling_ramp": 2.5},
    ],
)
def test_nonsense_probabilities_are_refused(bad):
    with pytest.raises(ValueError, match=rf"TrainConfig: {next(iter(bad))} must be"):
        TrainConfig(**bad)


def test_a_record_without_the_fields_reads_as_teacher_forcing():
    config = TrainConfig.from_dict(
        {k: v for k, v in TOY_CONFIG.to_dict().items() if not k.startswith("scheduled_sampling")}
    )
    assert (config.scheduled_sampling, config.scheduled_sampling_ramp) == (0.0, 0)
    assert config.changes_on_resume(TOY_CONFIG) == []


# --------------------------------------------------------------------------------------
# In the training loop
# --------------------------------------------------------------------------------------


def test_p_zero_trains_exactly_as_teacher_forcing(tmp_path, corpus, monkeypatch):
    plain = run(corpus, tmp_path / "plain", TOY_CONFIG.replace(epochs=1))
    monkeypatch.setattr(training_run, "scheduled_inputs", lambda *a, **k: pytest.fail("p = 0 never mixes"))
    ramped = run(corpus, tmp_path / "ramp", TOY_CONFIG.replace(epochs=1, scheduled_sampling_ramp=10))
    assert without_timing(ramped["history"]) == without_timing(plain["history"])
    a, b = weights(tmp_path / "plain" / "last.pt"), weights(tmp_path / "ramp" / "last.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_scheduled_sampling_trains_and_resumes_identically(tmp_path, corpus, monkeypatch, stop_signals_default):  # noqa: F811
    calls = []
    real = training_run.scheduled_inputs
    monkeypatch.setattr(
        training_run, "scheduled_inputs", lambda model, batch, p, *a: calls.append(p) or real(model, batch, p, *a)
    )
    straight = run(corpus, tmp_path / "a", SCHEDULED)
    monkeypatch.undo()
    history = straight["history"]
    steps_per_epoch = history[0]["step"]
    assert calls and calls[0] == pytest.approx(0.3 / 20) and max(calls) == pytest.approx(0.3), "the ramp, then p"
    assert len(calls) == 2 * steps_per_epoch - 1, "every update but the first (p = 0 at step 0) mixes"
    assert history[1]["train_loss"] < history[0]["train_loss"] and history[1]["val_loss"] < history[0]["val_loss"], (
        "it learns"
    )
    assert read_checkpoint(tmp_path / "a" / "last.pt")["train_config"]["scheduled_sampling"] == 0.3

    signal_during_step(monkeypatch, at=steps_per_epoch + 3, signum=signal.SIGINT)  # in the middle of epoch 2
    with pytest.raises(KeyboardInterrupt):
        run(corpus, tmp_path / "b", SCHEDULED)
    monkeypatch.undo()
    resumed = run(corpus, tmp_path / "b", SCHEDULED)
    assert without_timing(resumed["history"]) == without_timing(history)
    a, b = weights(tmp_path / "a" / "last.pt"), weights(tmp_path / "b" / "last.pt")
    assert all(torch.equal(a[k], b[k]) for k in a), "weight for weight"

    with pytest.raises(ResumeMismatchError, match=r"scheduled_sampling: 0.3 -> 0.0"):
        run(corpus, tmp_path / "b", SCHEDULED.replace(epochs=3, scheduled_sampling=0.0))
