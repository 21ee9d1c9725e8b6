"""Tests of transformer_lessons.train: label smoothing, the schedule, the loop, checkpoints.

The loop is tested on a made-up "language pair" (word-for-word substitution
between two small lexicons) so it runs in seconds on a CPU without spaCy or data.
"""

from __future__ import annotations

import json
import math
import random

import pytest
import torch
import torch.nn.functional as F

from transformer_lessons.attention import MultiHeadAttention
from transformer_lessons.checkpoint import export_for_inference, load_checkpoint, read_checkpoint
from transformer_lessons.config import TRAIN_PRESETS, ModelConfig, TrainConfig, get_train_config
from transformer_lessons.data import Corpus, Vocab
from transformer_lessons.errors import CheckpointError, ResumeMismatchError
from transformer_lessons.loss import LabelSmoothingLoss, smoothed_targets
from transformer_lessons.model import Transformer
from transformer_lessons.run import train
from transformer_lessons.schedule import noam_rate, noam_scheduler
from transformer_lessons.train import make_optimizer, train_step

# --------------------------------------------------------------------------------------
# A toy corpus shared with test_decode.py and test_cli.py
# --------------------------------------------------------------------------------------

LEXICON = {
    "ein": "a",
    "eine": "a",
    "mann": "man",
    "frau": "woman",
    "hund": "dog",
    "kind": "child",
    "läuft": "runs",
    "springt": "jumps",
    "sitzt": "sits",
    "schläft": "sleeps",
    "isst": "eats",
    "rot": "red",
    "blau": "blue",
    "groß": "big",
    "klein": "small",
    "im": "in the",
    "park": "park",
    "wasser": "water",
    "schnee": "snow",
    "draußen": "outside",
}
SPLIT_SIZES = {"train": 600, "val": 40, "test_2016_flickr": 40}


def toy_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` (German, English) sentences: random words translated word for word, then a full stop."""
    rng = random.Random(seed)
    words = sorted(LEXICON)
    pairs = []
    for _ in range(n):
        de = [rng.choice(words) for _ in range(rng.randint(2, 6))]
        en = " ".join(LEXICON[w] for w in de)
        pairs.append((" ".join(de) + " .", en + " ."))
    return pairs


def toy_corpus(sizes: dict[str, int] | None = None, bpe_merges: int | None = None) -> Corpus:
    """A :class:`Corpus` of toy pairs (tokens are whitespace-split, as spaCy would split them).

    With ``bpe_merges``, both sides are subword pieces, as ``prepare_corpus(bpe_merges=...)`` makes them.
    """
    from transformer_lessons.bpe import BPE

    sizes = sizes or SPLIT_SIZES
    text = {split: toy_pairs(n, seed) for seed, (split, n) in enumerate(sizes.items())}
    tokens = {split: [(de.split(), en.split()) for de, en in pairs] for split, pairs in text.items()}
    src_bpe = BPE.learn((s for s, _ in tokens["train"]), bpe_merges) if bpe_merges else None
    tgt_bpe = BPE.learn((t for _, t in tokens["train"]), bpe_merges) if bpe_merges else None
    src_vocab = Vocab.build((s for s, _ in tokens["train"]), min_freq=1, bpe=src_bpe)
    tgt_vocab = Vocab.build((t for _, t in tokens["train"]), min_freq=1, bpe=tgt_bpe)
    ids = {
        split: [(src_vocab.encode_words(s), tgt_vocab.encode_words(t)) for s, t in pairs]
        for split, pairs in tokens.items()
    }
    return Corpus(src_vocab, tgt_vocab, ids, text, tokens, {"toy": True, "bpe_merges": bpe_merges})


TOY_MODEL = ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, dropout=0.1, max_len=32, tie_embeddings=True)
TOY_CONFIG = TrainConfig(
    name="toy",
    model=TOY_MODEL,
    max_tokens=128,
    epochs=3,
    lr_factor=0.5,
    warmup=30,
    beam_size=2,
    eval_every=1,
    max_output_extra=5,
)


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return toy_corpus()


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus):
    """One finished toy run: (result, out_dir)."""
    out = tmp_path_factory.mktemp("toy_run")
    result = train(TOY_CONFIG, corpus, out_dir=out, device="cpu", progress=False)
    return result, out


# --------------------------------------------------------------------------------------
# Label smoothing
# --------------------------------------------------------------------------------------


def test_smoothed_targets_values():
    target = torch.tensor([[3, 1, 0]])  # pad_id = 1
    q = smoothed_targets(target, vocab_size=6, pad_id=1, smoothing=0.2)  # (1, 3, 6)
    eps_each = 0.2 / 4  # spread over V - 2 = 4 tokens: neither the true one nor <pad>
    assert torch.allclose(q[0, 0], torch.tensor([eps_each, 0.0, eps_each, 0.8, eps_each, eps_each]))
    assert torch.equal(q[0, 1], torch.zeros(6)), "a padding position must not count"
    assert torch.allclose(q[0, 2], torch.tensor([0.8, 0.0, eps_each, eps_each, eps_each, eps_each]))
    assert torch.allclose(q[0, [0, 2]].sum(-1), torch.ones(2))


def test_loss_equals_direct_cross_entropy_with_smoothed_targets():
    V, pad = 11, 1
    logits = torch.randn(3, 5, V)
    target = torch.randint(0, V, (3, 5))
    target[0, 3:] = pad
    q = smoothed_targets(target, V, pad, 0.1)
    direct = -(q * logits.log_softmax(-1)).sum() / (target != pad).sum()
    loss = LabelSmoothingLoss(V, pad, 0.1)(logits, target)
    assert torch.allclose(loss, direct, atol=1e-6)


def test_loss_matches_torch_cross_entropy_where_definitions_coincide():
    V, pad = 9, 1
    logits = torch.randn(4, 6, V)
    target = torch.randint(0, V, (4, 6))
    target[1, 2:] = pad
    real = target != pad
    # Without smoothing it is exactly F.cross_entropy with ignore_index.
    ours = LabelSmoothingLoss(V, pad, 0.0)(logits, target)
    assert torch.allclose(ours, F.cross_entropy(logits.reshape(-1, V), target.reshape(-1), ignore_index=pad), atol=1e-6)
    # With smoothing, torch's soft-target cross-entropy on our target distribution agrees.
    q = smoothed_targets(target, V, pad, 0.1)
    torch_soft = F.cross_entropy(logits[real], q[real])
    assert torch.allclose(LabelSmoothingLoss(V, pad, 0.1)(logits, target), torch_soft, atol=1e-6)
    # torch's label_smoothing spreads ε over all V classes (pad and true one included): close, not equal.
    torch_ls = F.cross_entropy(logits[real], target[real], label_smoothing=0.1)
    assert not torch.allclose(LabelSmoothingLoss(V, pad, 0.1)(logits, target), torch_ls, atol=1e-6)


def test_loss_is_finite_for_extreme_logits():
    V, pad = 7, 1
    logits = torch.full((2, 3, V), -1e4)
    logits[..., 4] = 1e4  # certain of token 4
    target = torch.tensor([[4, 5, pad], [2, 4, 4]])
    loss_fn = LabelSmoothingLoss(V, pad, 0.1)
    loss = loss_fn(logits, target)
    assert torch.isfinite(loss), "log(0) must never appear: use log_softmax"
    logits.requires_grad_(True)
    loss_fn(logits, target).backward()
    assert torch.isfinite(logits.grad).all()
    assert torch.isfinite(loss_fn(logits.detach().bfloat16(), target))


def test_loss_ignores_padding_positions():
    V, pad = 8, 1
    target = torch.tensor([[2, 3, pad, pad]])
    logits = torch.randn(1, 4, V, requires_grad=True)
    loss_fn = LabelSmoothingLoss(V, pad)
    loss = loss_fn(logits, target)
    loss.backward()
    assert torch.equal(logits.grad[0, 2:], torch.zeros(2, V)), "padding positions must get no gradient"
    other = logits.detach().clone()
    other[0, 2:] = torch.randn(2, V) * 100
    assert torch.allclose(loss_fn(other, target), loss.detach())
    assert torch.allclose(loss_fn(logits, target, reduction="sum"), loss * 2)


def test_loss_is_lowest_at_the_smoothed_distribution():
    V, pad, eps = 6, 1, 0.1
    target = torch.tensor([[3]])
    q = smoothed_targets(target, V, pad, eps)
    best = torch.log(q.clamp(min=1e-30))  # logits whose softmax is q (pad gets ~0)
    loss_fn = LabelSmoothingLoss(V, pad, eps)
    entropy = -(q[q > 0] * q[q > 0].log()).sum()
    assert torch.allclose(loss_fn(best, target), entropy, atol=1e-5), "minimum = entropy of q"
    confident = torch.full((1, 1, V), -20.0)
    confident[..., 3] = 20.0
    assert loss_fn(confident, target) > loss_fn(best, target), "smoothing penalises over-confidence"


# --------------------------------------------------------------------------------------
# Learning-rate schedule
# --------------------------------------------------------------------------------------


def test_noam_rate_formula_and_peak():
    d_model, warmup = 512, 4000
    for step in (1, 10, 3999, 4000, 4001, 100_000):
        expected = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert math.isclose(noam_rate(step, d_model, warmup), expected, rel_tol=1e-12)
    rates = [noam_rate(s, d_model, warmup) for s in range(1, 20_000, 7)]
    peak_step = 1 + 7 * max(range(len(rates)), key=rates.__getitem__)
    assert abs(peak_step - warmup) <= 7, "the rate peaks at step = warmup"
    assert math.isclose(noam_rate(warmup, d_model, warmup), (d_model * warmup) ** -0.5)
    assert math.isclose(noam_rate(100, 256, 50, factor=2.0), 2 * noam_rate(100, 256, 50))
    assert noam_rate(0, d_model, warmup) == noam_rate(1, d_model, warmup), "step 0 is treated as step 1"


def test_noam_scheduler_sets_the_rate_of_each_update():
    model = torch.nn.Linear(3, 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=123.0)
    scheduler = noam_scheduler(optimizer, d_model=64, warmup=10, factor=0.5)
    for k in range(1, 30):  # the k-th update uses noam_rate(k)
        assert math.isclose(optimizer.param_groups[0]["lr"], noam_rate(k, 64, 10, 0.5), rel_tol=1e-9)
        optimizer.step()
        scheduler.step()


# --------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------


def test_presets_and_config_round_trip(monkeypatch):
    quick, full = TRAIN_PRESETS["quick"], TRAIN_PRESETS["full"]
    assert quick.model.d_model < full.model.d_model and quick.limit is not None and full.limit is None
    assert full.model.tie_embeddings and full.smoothing == 0.1 and full.betas == (0.9, 0.98) and full.eps == 1e-9
    assert full.beam_size == 4 and full.length_penalty == 0.6
    for config in (quick, full, TOY_CONFIG):
        assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    monkeypatch.setenv("TRANSFORMER_LESSONS_MODE", "quick")
    assert get_train_config(None) is quick
    assert get_train_config("full") is full
    with pytest.raises(ValueError, match="quick"):
        get_train_config("huge")
    with pytest.raises(ValueError, match="unknown TrainConfig fields"):
        TrainConfig.from_dict({"epochz": 3})


# --------------------------------------------------------------------------------------
# The training loop
# --------------------------------------------------------------------------------------


def test_train_reduces_loss_and_writes_its_files(trained):
    result, out = trained
    history = result["history"]
    assert [h["epoch"] for h in history] == [1, 2, 3]
    assert history[-1]["train_loss"] < history[0]["train_loss"] - 0.5
    assert history[-1]["val_loss"] < history[0]["val_loss"]
    assert all(h["val_bleu"] is not None and h["tokens_per_s"] > 0 for h in history)
    assert result["stopped"] == "done" and result["step"] == history[-1]["step"]
    for name in ("last.pt", "best.pt", "history.json", "metrics.json", "test_hypotheses.txt"):
        assert (out / name).is_file(), name
    metrics = json.loads((out / "metrics.json").read_text())
    test = metrics["test_2016_flickr"]
    assert "case:mixed" in test["signature"] and "tok:13a" in test["signature"]
    assert 0.0 <= test["bleu"] <= 100.0 and metrics["torch"] == torch.__version__
    assert json.loads((out / "history.json").read_text()) == history


def test_checkpoint_loads_with_weights_only(trained, corpus):
    _, out = trained
    raw = torch.load(out / "last.pt", weights_only=True)  # plain types and tensors only
    assert raw["step"] > 0 and "optimizer" in raw and raw["src_vocab"]["itos"] == corpus.src_vocab.itos
    model, src_vocab, tgt_vocab, info = load_checkpoint(out / "best.pt", device="cpu")
    assert not model.training and src_vocab == corpus.src_vocab and tgt_vocab == corpus.tgt_vocab
    assert info["train_config"]["name"] == "toy" and info["best_epoch"] == raw["best_epoch"]
    assert model.generator.weight is model.tgt_embed.table.weight, "tied weights stay tied after loading"


def test_checkpoint_round_trip_gives_the_same_model(tmp_path, corpus):
    out = tmp_path / "run"
    config = TOY_CONFIG.replace(epochs=1)
    train(config, corpus, out_dir=out, device="cpu", progress=False, evaluate_test=False)
    model, _, _, _ = load_checkpoint(out / "last.pt", device="cpu")
    again, _, _, _ = load_checkpoint(out / "last.pt", device="cpu")
    src = torch.tensor([[5, 6, 7, 3]])
    tgt = torch.tensor([[2, 5, 6]])
    assert torch.equal(model(src, tgt), again(src, tgt))
    size = export_for_inference(out / "last.pt", tmp_path / "small.pt")
    assert size < (out / "last.pt").stat().st_size / 2, "no optimizer state, fp16 weights"
    small, _, _, info = load_checkpoint(tmp_path / "small.pt", device="cpu")
    assert info["dtype"] == "float16" and "optimizer" not in torch.load(tmp_path / "small.pt", weights_only=True)
    assert torch.allclose(small(src, tgt), model(src, tgt), atol=0.05)


def test_resume_continues_exactly_where_it_stopped(tmp_path, corpus):
    config = TOY_CONFIG.replace(epochs=2, eval_every=2)
    straight = train(config, corpus, out_dir=tmp_path / "a", device="cpu", progress=False, evaluate_test=False)
    steps_per_epoch = straight["history"][0]["step"]
    stop_at = steps_per_epoch + 3  # in the middle of the second epoch
    first = train(config, corpus, out_dir=tmp_path / "b", device="cpu", progress=False, max_steps=stop_at)
    assert first["stopped"] == "max_steps" and first["step"] == stop_at and len(first["history"]) == 1
    assert torch.load(tmp_path / "b" / "last.pt", weights_only=True)["step"] == stop_at
    resumed = train(config, corpus, out_dir=tmp_path / "b", device="cpu", progress=False, evaluate_test=False)
    assert resumed["step"] == straight["step"]
    for a, b in zip(straight["history"], resumed["history"], strict=True):
        assert a["step"] == b["step"]
        for key in ("train_loss", "val_loss", "lr"):
            assert math.isclose(a[key], b[key], rel_tol=1e-4), key
    a_state = torch.load(tmp_path / "a" / "last.pt", weights_only=True)["model"]
    b_state = torch.load(tmp_path / "b" / "last.pt", weights_only=True)["model"]
    assert all(torch.allclose(a_state[k], b_state[k], atol=1e-5) for k in a_state)
    # A finished run with more epochs asked for continues; one with resume=False starts over.
    longer = train(
        config.replace(epochs=3), corpus, out_dir=tmp_path / "b", device="cpu", progress=False, evaluate_test=False
    )
    assert [h["epoch"] for h in longer["history"]] == [1, 2, 3]
    fresh = train(
        config.replace(epochs=1),
        corpus,
        out_dir=tmp_path / "b",
        device="cpu",
        progress=False,
        resume=False,
        evaluate_test=False,
    )
    assert fresh["step"] == steps_per_epoch


def test_keyboard_interrupt_saves_then_reraises(tmp_path, corpus, monkeypatch):
    config = TOY_CONFIG.replace(epochs=1)
    calls = {"n": 0}
    real_clip = torch.nn.utils.clip_grad_norm_

    def clip_then_interrupt(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real_clip(*args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        train(config, corpus, out_dir=tmp_path, device="cpu", progress=False)
    saved = torch.load(tmp_path / "last.pt", weights_only=True)
    assert saved["step"] == 4 and saved["batch_in_epoch"] == 4
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", real_clip)
    resumed = train(config, corpus, out_dir=tmp_path, device="cpu", progress=False, evaluate_test=False)
    assert resumed["history"][0]["step"] == resumed["step"] > 4


def test_mismatched_or_broken_checkpoints_raise_checkpoint_error(trained, tmp_path, corpus):
    _, out = trained
    ckpt = torch.load(out / "best.pt", weights_only=True)

    bigger = dict(ckpt, tgt_vocab=dict(ckpt["tgt_vocab"], itos=ckpt["tgt_vocab"]["itos"] + ["zebra"]))
    torch.save(bigger, tmp_path / "vocab.pt")
    with pytest.raises(CheckpointError, match=r"target vocabulary has \d+ tokens"):
        load_checkpoint(tmp_path / "vocab.pt", device="cpu")

    wider = dict(ckpt, model_config=dict(ckpt["model_config"], d_ff=128))
    torch.save(wider, tmp_path / "shape.pt")
    with pytest.raises(CheckpointError, match="shape mismatches.*w_1"):
        load_checkpoint(tmp_path / "shape.pt", device="cpu")

    deeper = dict(ckpt, model_config=dict(ckpt["model_config"], n_layers=2))
    torch.save(deeper, tmp_path / "layers.pt")
    with pytest.raises(CheckpointError, match="missing parameters"):
        load_checkpoint(tmp_path / "layers.pt", device="cpu")

    with pytest.raises(CheckpointError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "nothing.pt")
    (tmp_path / "garbage.pt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="is not a PyTorch checkpoint"):
        load_checkpoint(tmp_path / "garbage.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a transformer_lessons checkpoint"):
        load_checkpoint(tmp_path / "other.pt")

    # Resuming with a different model in the same directory is refused, with a way out.
    with pytest.raises(ResumeMismatchError, match="model: .*no-resume"):
        train(TOY_CONFIG.replace(model=TOY_MODEL.replace(d_ff=128)), corpus, out_dir=out, device="cpu", progress=False)


def test_a_corpus_prepared_otherwise_is_named(tmp_path):
    corpus = toy_corpus({"train": 60, "val": 8, "test_2016_flickr": 8}, bpe_merges=15)
    with pytest.warns(UserWarning, match=r"bpe_merges=15 \(config: None\)"):
        train(TOY_CONFIG.replace(epochs=1), corpus, out_dir=tmp_path, device="cpu", progress=False, evaluate_test=False)


# --------------------------------------------------------------------------------------
# Logging, the time limit, evaluation speed, precision, resuming errors
# --------------------------------------------------------------------------------------


def test_log_lines_are_whole_lines_without_progress_bars(tmp_path, corpus, capsys):
    config = TOY_CONFIG.replace(epochs=2)
    train(config, corpus, out_dir=tmp_path / "quiet", device="cpu", progress=False)
    assert capsys.readouterr().out == "", "progress=False alone (the notebooks' demo runs) prints nothing"
    train(config, corpus, out_dir=tmp_path / "log", device="cpu", progress=False, log=True)
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert [line.split()[1] for line in lines if line.startswith("epoch ")] == ["1", "2"], captured.out
    assert lines[-1].startswith("test_2016_flickr: sacreBLEU") and "\r" not in captured.out + captured.err
    train(
        config.replace(epochs=3),
        corpus,
        out_dir=tmp_path / "log",
        device="cpu",
        progress=False,
        log=True,
        evaluate_test=False,
    )
    assert capsys.readouterr().out.startswith(f"resuming {tmp_path / 'log' / 'last.pt'}: epoch 3")
    train(
        config.replace(epochs=3),
        corpus,
        out_dir=tmp_path / "log",
        device="cpu",
        progress=False,
        log=True,
        evaluate_test=False,
    )
    said = capsys.readouterr().out
    assert said.startswith(f"{tmp_path / 'log' / 'last.pt'}: already finished (3 epochs"), said  # not "resuming"


class StepClock:
    """Stands in for train's clock: one second passes per training step (at the clipping), none otherwise.

    So training time counts steps exactly, and evaluation takes no time at all.
    """

    def __init__(self, monkeypatch):
        import transformer_lessons.run_state as run_state

        self.now = 0.0
        real_clip = torch.nn.utils.clip_grad_norm_

        def clip_and_tick(*args, **kwargs):
            self.now += 1.0
            return real_clip(*args, **kwargs)

        monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip_and_tick)
        monkeypatch.setattr(run_state, "_clock", lambda: self.now)


def test_time_limit_counts_the_whole_run_and_resumes_exactly(tmp_path, corpus, monkeypatch):
    StepClock(monkeypatch)
    config = TOY_CONFIG.replace(epochs=2, eval_every=2)
    straight = train(config, corpus, out_dir=tmp_path / "a", device="cpu", progress=False, evaluate_test=False)
    spe = straight["history"][0]["step"]  # steps per epoch = seconds per epoch on this clock
    assert straight["train_time_s"] == 2 * spe and [h["elapsed_s"] for h in straight["history"]] == [spe, 2 * spe]

    cap = (spe + 3.5) / 60  # minutes: runs out after 4 steps of the second epoch
    first = train(config, corpus, out_dir=tmp_path / "b", device="cpu", progress=False, max_minutes=cap)
    assert first["stopped"] == "time_limit" and first["step"] == spe + 4 and len(first["history"]) == 1
    saved = torch.load(tmp_path / "b" / "last.pt", weights_only=True)
    assert saved["train_time_s"] == spe + 4 and saved["wall_time_s"] == spe + 4 and saved["batch_in_epoch"] == 4

    # The same cap again: the run's budget is spent, so not one more step (it used to grant a fresh budget per call).
    again = train(
        config, corpus, out_dir=tmp_path / "b", device="cpu", progress=False, max_minutes=cap, evaluate_test=False
    )
    assert again["stopped"] == "time_limit" and again["step"] == spe + 4 and again["train_time_s"] == spe + 4

    # A larger cap continues; the result is the uninterrupted run's, times included.
    rest = train(
        config, corpus, out_dir=tmp_path / "b", device="cpu", progress=False, max_minutes=10.0, evaluate_test=False
    )
    assert rest["stopped"] == "done" and rest["step"] == straight["step"] and rest["train_time_s"] == 2 * spe
    for a, b in zip(straight["history"], rest["history"], strict=True):
        assert a["step"] == b["step"] and a["elapsed_s"] == b["elapsed_s"] and a["epoch_time_s"] == b["epoch_time_s"]
        for key in ("train_loss", "val_loss", "val_bleu", "tokens_per_s"):
            assert a[key] == b[key] or math.isclose(a[key], b[key], rel_tol=1e-4), key
    a_state = torch.load(tmp_path / "a" / "last.pt", weights_only=True)["model"]
    b_state = torch.load(tmp_path / "b" / "last.pt", weights_only=True)["model"]
    assert all(torch.allclose(a_state[k], b_state[k], atol=1e-5) for k in a_state)


def test_metrics_count_the_epoch_a_time_limit_stopped_inside(tmp_path, corpus, monkeypatch):
    StepClock(monkeypatch)
    result = train(TOY_CONFIG, corpus, out_dir=tmp_path, device="cpu", progress=False, max_minutes=3.5 / 60)
    assert result["stopped"] == "time_limit" and result["step"] == 4 and result["history"] == []
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    steps_per_epoch = len(corpus.batcher("train", TOY_CONFIG.max_tokens, max_len=TOY_MODEL.max_len))
    assert metrics["train_time_s"] == 4.0 and metrics["epochs_completed"] == 0
    assert metrics["epochs"] == round(4 / steps_per_epoch, 3) > 0
    assert metrics["train_tokens_per_s"] > 0 and metrics["stopped"] == "time_limit" and metrics["autocast"] == "float32"


def test_evaluation_inside_train_uses_the_fused_attention(tmp_path, corpus, monkeypatch):
    import transformer_lessons.translation as translation
    from transformer_lessons.attention import MultiHeadAttention

    seen = []
    real_evaluate = translation.evaluate

    def spying_evaluate(model, split, **kwargs):
        seen.append((split, {m.record_weights for m in model.modules() if isinstance(m, MultiHeadAttention)}))
        return real_evaluate(model, split, **kwargs)

    monkeypatch.setattr(translation, "evaluate", spying_evaluate)
    train(TOY_CONFIG.replace(epochs=1), corpus, out_dir=tmp_path, device="cpu", progress=False)
    assert seen == [("val", {False}), ("test_2016_flickr", {False})], "validation and test decoding record no weights"


def test_fused_attention_restores_each_layer_setting():
    from transformer_lessons.decode import fused_attention

    model = Transformer(TOY_MODEL, 20, 20).eval()
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    layers[0].record_weights = True  # one layer set by hand, the others at the default None
    with pytest.raises(ZeroDivisionError), fused_attention(model):
        assert all(m.record_weights is False for m in layers)
        1 / 0  # noqa: B018  (the settings come back even when the block fails)
    assert [m.record_weights for m in layers] == [True] + [None] * (len(layers) - 1)


@pytest.mark.parametrize(
    ("device_type", "capability", "expected"),
    [
        ("cuda", (9, 0), torch.bfloat16),  # H100 / H200
        ("cuda", (8, 0), torch.bfloat16),  # A100
        ("cuda", (8, 6), torch.bfloat16),  # RTX 30xx
        ("cuda", (7, 5), None),  # T4 (Colab's free GPU): no bf16 tensor cores, float32
        ("cuda", (7, 0), None),  # V100
        ("cuda", (6, 1), None),
        ("cpu", None, None),
    ],
)
def test_autocast_dtype_uses_bf16_only_from_ampere_on(device_type, capability, expected):
    from transformer_lessons.hardware import autocast_dtype

    assert autocast_dtype(device_type, capability) is expected


def test_an_unreadable_last_checkpoint_says_how_to_start_over(tmp_path, corpus, trained):
    (tmp_path / "last.pt").write_bytes(b"half a checkpoint")
    with pytest.raises(
        CheckpointError, match=r"cannot resume: .*is not a PyTorch checkpoint.*delete .*last\.pt.*--no-resume"
    ):
        train(TOY_CONFIG, corpus, out_dir=tmp_path, device="cpu", progress=False)
    _, out = trained
    (tmp_path / "last.pt").write_bytes((out / "best.pt").read_bytes())  # weights only, no optimizer state
    with pytest.raises(CheckpointError, match=r"lacks the training state .*optimizer.*--no-resume"):
        train(TOY_CONFIG, corpus, out_dir=tmp_path, device="cpu", progress=False)
    fresh = train(
        TOY_CONFIG.replace(epochs=1),
        corpus,
        out_dir=tmp_path,
        device="cpu",
        progress=False,
        resume=False,
        evaluate_test=False,
    )
    assert fresh["stopped"] == "done"


def test_autocast_for_a_cpu_is_a_no_op_context():
    from transformer_lessons.hardware import autocast_for

    dtype, autocast = autocast_for(torch.device("cpu"))
    assert dtype is None
    with autocast():
        y = torch.ones(2, 2) @ torch.ones(2, 2)
    assert y.dtype == torch.float32


def test_precision_chooses_the_autocast():
    from transformer_lessons.hardware import autocast_for

    cpu = torch.device("cpu")
    assert autocast_for(cpu, "auto")[0] is None and autocast_for(cpu, "float32")[0] is None
    dtype, autocast = autocast_for(cpu, "bfloat16")
    assert dtype is torch.bfloat16
    with autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="precision must be auto, native, float32 or bfloat16, got 'half'"):
        autocast_for(cpu, "half")
    with pytest.raises(
        ValueError, match=r"^TrainConfig: precision must be one of auto, native, float32, bfloat16, got 'fp16'$"
    ):
        TOY_CONFIG.replace(precision="fp16")


def test_a_bfloat16_step_keeps_the_loss_the_weights_and_adams_state_in_float32(corpus):
    from transformer_lessons.hardware import autocast_for

    torch.manual_seed(0)
    model = Transformer(TOY_MODEL, len(corpus.src_vocab), len(corpus.tgt_vocab))
    optimizer = make_optimizer(model, TOY_CONFIG)
    criterion = LabelSmoothingLoss(len(corpus.tgt_vocab), corpus.tgt_vocab.pad_id, 0.1)
    batch = next(iter(corpus.batcher("train", 128, shuffle=False)))
    _, autocast = autocast_for(torch.device("cpu"), "bfloat16")
    seen = []
    model.generator.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    loss = train_step(model, batch, criterion, optimizer, clip_norm=1.0, autocast=autocast)
    assert seen == [torch.bfloat16], "the matrix products ran in bfloat16"
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert all(
        p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters() if p.grad is not None
    )
    states = [s for s in optimizer.state.values()]
    assert states and all(s["exp_avg"].dtype == s["exp_avg_sq"].dtype == torch.float32 for s in states)


def test_a_bfloat16_run_on_a_cpu_trains_and_says_so(tmp_path, corpus):
    result = train(
        TOY_CONFIG.replace(epochs=1, precision="bfloat16"), corpus, out_dir=tmp_path, device="cpu", progress=False
    )
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["autocast"] == "bfloat16" and metrics["train_config"]["precision"] == "bfloat16"
    assert math.isfinite(result["history"][-1]["train_loss"])


def test_a_run_takes_exactly_the_steps_of_train_step(tmp_path, corpus):
    # A run (run.py) is the step of train.py repeated over seeded batches, bit for bit: the weights after a few
    # updates of train() equal those of a plain loop over train_step. It held before the run's machinery moved out
    # of train.py (checked on the commit before the move) and keeps holding for every later move.
    config, k = TOY_CONFIG.replace(epochs=1), 5
    train(config, corpus, out_dir=tmp_path, device="cpu", progress=False, max_steps=k)
    saved = read_checkpoint(tmp_path / "last.pt")
    assert saved["step"] == k

    torch.manual_seed(config.seed)
    random.seed(config.seed)
    model = Transformer(config.model, len(corpus.src_vocab), len(corpus.tgt_vocab))
    optimizer = make_optimizer(model, config)
    scheduler = noam_scheduler(optimizer, config.model.d_model, config.warmup, config.lr_factor)
    criterion = LabelSmoothingLoss(len(corpus.tgt_vocab), corpus.tgt_vocab.pad_id, config.smoothing)
    batcher = corpus.batcher("train", config.max_tokens, shuffle=True, seed=config.seed, max_len=config.model.max_len)
    batcher.set_epoch(0)
    for _, batch in zip(range(k), batcher):
        train_step(model, batch, criterion, optimizer, scheduler, config.clip_norm)
    mine = model.state_dict()
    assert saved["model"].keys() == mine.keys()
    different = [name for name, weight in mine.items() if not torch.equal(weight, saved["model"][name])]
    assert not different, f"the run's weights differ from the plain loop's in {different}"


def test_the_explicit_attention_softmax_runs_in_float32_under_bfloat16_autocast(monkeypatch):
    from transformer_lessons.attention import scaled_dot_product_attention

    seen = []
    real = torch.Tensor.softmax
    monkeypatch.setattr(torch.Tensor, "softmax", lambda self, *a, **k: seen.append(self.dtype) or real(self, *a, **k))
    q = torch.randn(1, 2, 5, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, weights = scaled_dot_product_attention(q @ torch.eye(8), q @ torch.eye(8), q)  # matmuls make them bf16
    assert seen == [torch.float32] and weights.dtype == torch.bfloat16
    assert torch.allclose(weights.float().sum(-1), torch.ones(1, 2, 5), atol=1e-2)
