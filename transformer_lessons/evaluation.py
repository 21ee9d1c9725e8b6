"""A run's validation after each epoch, and its final test on test_2016_flickr.

* :func:`validation_loss` and :func:`validate`: the validation loss, perplexity and greedy BLEU.
* :func:`final_test`: the best weights (or, with ``average_last``, the mean of the last epochs'
  weights, :mod:`.averaging`) decoded with the paper's beam; ``test_hypotheses.txt`` and ``metrics.json``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from contextlib import nullcontext
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

import transformer_lessons.translation as translation
from transformer_lessons.averaging import average_last_epochs, saved_epochs
from transformer_lessons.atomic import atomic_write_json, atomic_write_text
from transformer_lessons.checkpoint import load_checkpoint, save_checkpoint
from transformer_lessons.decode import fused_attention
from transformer_lessons.hardware import device_name
from transformer_lessons.loss import LabelSmoothingLoss
from transformer_lessons.model import Transformer
from transformer_lessons.run_state import Run, TrainState, checkpoint_dict

if TYPE_CHECKING:
    from transformer_lessons.data import Corpus


@torch.no_grad()
def validation_loss(
    model: Transformer,
    corpus: "Corpus",
    split: str,
    criterion: LabelSmoothingLoss,
    max_tokens: int,
    device: torch.device,
    autocast=nullcontext,
) -> tuple[float, float]:
    """Teacher-forced ``(label-smoothed loss, perplexity)`` per target token on ``split``.

    The perplexity is ``exp`` of the plain cross-entropy (no smoothing), the
    number the paper's Table 3 reports.
    """
    model.eval()
    total, nll, tokens = 0.0, 0.0, 0
    for batch in corpus.batcher(
        split, max_tokens, shuffle=False, max_len=model.config.max_len
    ):  # BLEU still sees every pair
        batch = batch.to(device)
        with autocast():
            logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, T, V)
        total += criterion(logits, batch.tgt_out, reduction="sum").item()
        nll += F.cross_entropy(
            logits.float().flatten(0, 1), batch.tgt_out.flatten(), ignore_index=criterion.pad_id, reduction="sum"
        ).item()
        tokens += batch.n_tokens
    return total / max(tokens, 1), math.exp(min(nll / max(tokens, 1), 50.0))


def validate(run: Run, with_bleu: bool) -> tuple[float, float, float | None]:
    """``(val loss, val perplexity, val BLEU or None)``: BLEU of greedy decoding on ``bleu_val_limit`` sentences."""
    config, corpus = run.config, run.corpus
    with fused_attention(run.model):  # no attention weights kept: the fused kernel, faster
        val_loss, val_ppl = validation_loss(
            run.model, corpus, "val", run.criterion, config.max_tokens, run.device, run.autocast
        )
        if not with_bleu:
            return val_loss, val_ppl, None
        scores = translation.evaluate(
            run.model,
            "val",
            corpus=corpus,
            src_vocab=corpus.src_vocab,
            tgt_vocab=corpus.tgt_vocab,
            beam_size=1,
            limit=config.bleu_val_limit,
            max_output_extra=config.max_output_extra,
        )
    return val_loss, val_ppl, scores["bleu"]


# --------------------------------------------------------------------------------------
# The final test
# --------------------------------------------------------------------------------------


def final_test(run: Run, state: TrainState, stopped: str) -> dict:
    """Decode the test set with the best weights and the paper's beam; write ``test_hypotheses.txt`` and ``metrics.json``."""
    import sacrebleu

    config, corpus = run.config, run.corpus
    model, averaged = _model_to_test(run, state)
    with fused_attention(model):
        test = translation.evaluate(
            model,
            "test_2016_flickr",
            corpus=corpus,
            src_vocab=corpus.src_vocab,
            tgt_vocab=corpus.tgt_vocab,
            beam_size=config.beam_size,
            length_penalty=config.length_penalty,
            progress=run.progress,
            max_output_extra=config.max_output_extra,
        )
    atomic_write_text(run.out / "test_hypotheses.txt", "\n".join(test.pop("hypotheses")) + "\n")
    test.pop("references", None)
    # Whole epochs from the history, plus the epoch a time limit stopped inside (its counts are in the state).
    tokens = sum(h["tokens_per_s"] * h["epoch_time_s"] for h in state.history) + state.epoch_tokens
    partial = round(state.batch_in_epoch / len(run.batcher), 3) if state.batch_in_epoch else 0  # 0.5: half-way through
    whole = sum(h.get("partial", 1) for h in state.history)  # a to_end run's last epoch may be a part-epoch
    metrics = {
        "preset": config.name,
        "test_2016_flickr": test,
        "tested": "averaged.pt" if averaged else "best.pt",
        "averaged": averaged,
        "best_epoch": state.best_epoch,
        "best_val_bleu": state.best_val_bleu if state.best_epoch is not None else None,
        "epochs": round(whole + partial, 3),
        "epochs_completed": sum(1 for h in state.history if "partial" not in h),
        "steps": state.step,
        "stopped": stopped,
        "train_time_s": state.train_time_s,  # every call of the run together, evaluation excluded
        "wall_time_s": run.wall_seconds(state),  # every call together, evaluation included
        "train_tokens_per_s": tokens / max(state.train_time_s, 1e-9),
        "parameters": run.model.num_parameters(),
        "device": device_name(run.device),
        "autocast": str(run.amp_dtype).replace("torch.", "") if run.amp_dtype is not None else "float32",
        "world_size": run.dist.world_size,
        "torch": torch.__version__,
        "sacrebleu": sacrebleu.__version__,
        "train_config": config.to_dict(),
        "corpus": {k: len(v) for k, v in corpus.pairs.items()}
        | {"src_vocab": len(corpus.src_vocab), "tgt_vocab": len(corpus.tgt_vocab)},
    }
    atomic_write_json(run.out / "metrics.json", metrics)
    if run.log:
        print(
            f"test_2016_flickr: sacreBLEU {test['bleu']:.2f} ({test['signature']}); "
            f"tutorial BLEU (lowercased, tokenized) {test['tutorial_bleu']:.2f}",
            flush=True,
        )
    return metrics


def _model_to_test(run: Run, state: TrainState) -> tuple[Transformer, dict | None]:
    """``best.pt``'s model; or, with ``average_last > 1``, the mean of the last epochs' weights, saved as ``averaged.pt``.

    The second value records the averaging: which epochs, and the mean's validation loss and BLEU (``None`` without).
    """
    n = run.config.average_last
    if n > 1 and not saved_epochs(run.out):  # stopped (time limit, Ctrl-C) before an epoch ended: nothing to average
        if run.log:
            print("no epoch's weights saved yet: nothing to average; testing the model as it is", flush=True)
        n = 1
    if n <= 1:
        return (load_checkpoint(run.best_path, run.device)[0] if run.best_path.is_file() else run.model), None
    weights, epochs = average_last_epochs(run.out, n)
    model = copy.deepcopy(run.model)
    model.load_state_dict(weights)
    save_checkpoint(
        checkpoint_dict(run, state, training_state=False) | {"model": model.state_dict(), "averaged_epochs": epochs},
        run.out / "averaged.pt",
    )
    val_loss, _, val_bleu = validate(dataclasses.replace(run, model=model), with_bleu=True)
    if run.log:
        best = (
            f"; the best epoch, {state.best_epoch}: {state.best_val_bleu:.2f}" if state.best_epoch is not None else ""
        )
        print(
            f"averaged the weights of epochs {', '.join(map(str, epochs))}: val loss {val_loss:.3f}, val BLEU {val_bleu:.2f}"
            f"{best}; testing averaged.pt",
            flush=True,
        )
    return model, {"epochs": epochs, "val_loss": val_loss, "val_bleu": val_bleu}


__all__ = ["final_test", "validate", "validation_loss"]
