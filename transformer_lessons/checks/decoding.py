"""Check for greedy decoding, run on a small Transformer half-trained to copy.

The reference is :func:`transformer_lessons.decode.greedy_decode`. The model is
trained here, once per process, by the course's one training step
(:func:`transformer_lessons.train.train_step`) on batches made by the course's
batching (:func:`transformer_lessons.data.make_batch`). :func:`_greedy`
re-runs the loop with knobs, only to reproduce the mistakes learners make
(tokens not fed back, the first position's logits, no causal mask, ...).
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Callable

import torch
from torch import nn

from transformer_lessons.checks.common import (
    ExerciseError,
    call_answer,
    exercise,
    expect_tensor,
    expect_unchanged,
    known_bug,
    shape_of,
)
from transformer_lessons.checks.evidence import Inputs
from transformer_lessons.checks.slips import two_things
from transformer_lessons.config import ModelConfig
from transformer_lessons.data import Batch, make_batch
from transformer_lessons.decode import greedy_decode
from transformer_lessons.loss import LabelSmoothingLoss
from transformer_lessons.masks import causal_mask, padding_mask
from transformer_lessons.model import Transformer
from transformer_lessons.train import train_step

# The toy copy task of this check. Its special ids differ from the course's
# (transformer_lessons.specials: <pad> 1, <bos> 2, <eos> 3), so a decoder with hard-coded ids is caught.
_DEC_PAD = 0
_DEC_BOS = 1
_DEC_EOS = 2
_DEC_FIRST_SYMBOL = 3  # the symbols to copy are ids 3 .. _DEC_VOCAB - 1
_DEC_VOCAB = 10
_DEC_MAX_LEN = 9  # short enough that two of the six test sources are cut off without <eos>


def _copy_pairs(
    n: int, generator: torch.Generator, shortest: int = 2, longest: int = 7
) -> list[tuple[list[int], list[int]]]:
    """``n`` random symbol sequences of ``shortest`` to ``longest`` symbols, each paired with itself (no specials).

    Copy data: the target is the source. :func:`_copy_batch` adds <bos>, <eos> and padding.
    """
    lengths = torch.randint(shortest, longest + 1, (n,), generator=generator).tolist()
    symbols = [
        torch.randint(_DEC_FIRST_SYMBOL, _DEC_VOCAB, (length,), generator=generator).tolist() for length in lengths
    ]
    return [(s, s) for s in symbols]


def _copy_batch(n: int, generator: torch.Generator) -> Batch:
    """A padded copy batch: src = s <eos>, tgt_in = <bos> s, tgt_out = s <eos>, with their masks."""
    return make_batch(_copy_pairs(n, generator), _DEC_PAD, _DEC_BOS, _DEC_EOS)


@functools.lru_cache(maxsize=1)
def _decoding_model() -> Transformer:
    """A 2-layer Transformer trained for 60 steps to copy: it half works.

    Half-trained is the point: its outputs depend on the position, on the source and
    on every token fed back, rows end with <eos> after different numbers of steps and
    some never do, so each decoding bug below changes the output. A random model
    repeats one token and hides most of them. Training takes about half a second;
    the model is built once per process and returned in eval mode.
    """
    with torch.random.fork_rng(devices=[]), torch.enable_grad():
        torch.manual_seed(0)
        config = ModelConfig(n_layers=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0, max_len=32, tie_embeddings=False)
        model = Transformer(config, _DEC_VOCAB, _DEC_VOCAB)
        generator = torch.Generator().manual_seed(0)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
        criterion = LabelSmoothingLoss(_DEC_VOCAB, _DEC_PAD, smoothing=0.0)  # cross-entropy, <pad> ignored
        for _ in range(60):
            train_step(model, _copy_batch(32, generator), criterion, optimizer)
    return model.eval()  # train_step left it in train mode


def _decoding_cases() -> list[tuple[torch.Tensor, torch.Tensor, int]]:
    """``(src, src_mask, max_new_tokens)``: six padded sources, then one source with a tight max_new_tokens."""
    batch = _copy_batch(6, torch.Generator().manual_seed(9))  # src (6, S), padded
    one = batch.src[1:2, :7]  # (1, 7): one sentence, no padding, cut off after 4 tokens
    return [(batch.src, batch.src_mask, _DEC_MAX_LEN), (one, padding_mask(one, _DEC_PAD), 4)]


def _greedy(
    model,
    src,
    src_mask,
    max_new_tokens,
    bos_id,
    eos_id,
    *,
    feed="all",
    position=-1,
    causal=True,
    use_src_mask=True,
    softmax_dim=None,
):
    """Greedy decoding with knobs that reproduce the common bugs (defaults: the correct loop)."""
    mask = src_mask if use_src_mask else None
    memory = model.encode(src, mask)  # (B, S, D)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)  # (B, 1)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_new_tokens):
        inp = {"all": ys, "bos": ys[:, :1], "last": ys[:, -1:]}[feed]  # (B, t) or (B, 1)
        logits = model.decode(memory, mask, inp, causal_mask(inp.size(1)) if causal else None)  # (B, t, V)
        if softmax_dim is not None:
            logits = logits.softmax(dim=softmax_dim)
        next_token = logits[:, position].argmax(dim=-1).masked_fill(finished, eos_id)  # (B,)
        finished |= next_token == eos_id
        ys = torch.cat([ys, next_token[:, None]], dim=1)  # (B, t + 1)
        if bool(finished.all()):
            break
    return ys


def _rows_until_eos(ys: torch.Tensor, eos_id: int) -> list[list[int]]:
    """Each row's generated tokens (after <bos>) up to and including its first <eos>."""
    rows = []
    for row in ys[:, 1:].tolist():
        rows.append(row[: row.index(eos_id) + 1] if eos_id in row else row)
    return rows


class _DecodeSpy:
    """Record what the learner feeds the decoder: its input ids and whether a tgt_mask came with them."""

    def __init__(self, model: nn.Module):
        self.model, self.calls = model, []
        original = type(model).decode.__get__(model)

        def decode(memory, src_mask, tgt, tgt_mask=None):
            self.calls.append((tgt.detach().clone(), tgt_mask is not None))
            return original(memory, src_mask, tgt, tgt_mask)

        model.decode = decode  # an instance attribute: model(...) -> forward -> self.decode comes here too

    def close(self) -> None:
        self.model.__dict__.pop("decode", None)


_GREEDY_HINT = (
    "the decoder returns logits (B, t, V): take the last position's, (B, V), and its argmax over the "
    "vocabulary, (B,); append it to ys as a new column"
    "[[: next_token = logits[:, -1].argmax(dim=-1); ys = torch.cat([ys, next_token[:, None]], dim=1)]]"
)


def _off_by_one(max_new_tokens: int) -> str:
    return (
        f"off by one: a row without <eos> should have max_new_tokens = {max_new_tokens} tokens after <bos>, "
        f"got {max_new_tokens - 1}: the loop runs one step short[[: for _ in range(max_new_tokens)]]"
    )


def _check_greedy_structure(
    got: Any, B: int, max_new_tokens: int, bos_id: int, eos_id: int, expected: torch.Tensor
) -> None:
    """Type, shape, the <bos> column, eos padding and lengths: what any greedy decoder must satisfy."""
    expect_tensor(got, "the result")
    if got.is_floating_point() or got.dtype == torch.bool:
        raise ExerciseError(f"the result should hold token ids (dtype torch.long), got {got.dtype}")
    if got.dim() != 2 or got.size(0) != B:
        raise ExerciseError(
            f"the result should be (B, 1 + L) = ({B}, 1 + L) with L <= max_new_tokens = {max_new_tokens}, got shape {shape_of(got)}"
        )
    got = got.long()
    if got.size(1) > 1 + max_new_tokens:
        raise ExerciseError(
            f"the result has {got.size(1)} columns, more than 1 + max_new_tokens = {1 + max_new_tokens}: generate at most max_new_tokens "
            "tokens (one per loop step), and append only the last position's token each step"
        )
    if not bool((got[:, 0] == bos_id).all()):
        width = expected.size(1) - 1
        if got.size(1) >= width and torch.equal(got[:, :width], expected[:, 1:]):
            raise known_bug("the <bos> column is missing: return ys including the bos_id it started with, (B, 1 + L)")
        raise ExerciseError(f"every row must start with bos_id = {bos_id} (use the argument), got {got[:, 0].tolist()}")
    for b, row in enumerate(got[:, 1:].tolist()):
        if eos_id in row:
            after = row[row.index(eos_id) + 1 :]
            if any(token != eos_id for token in after):
                hint = (
                    f"row {b} goes on after its <eos>: {row}. A row that has produced eos_id is finished: from then "
                    "on append eos_id to it (keep a `finished` flag per row), and stop when every row is finished"
                    "[[: next_token = next_token.masked_fill(finished, eos_id)]]"
                )
                if got.size(1) - 1 == max_new_tokens - 1:  # a fixed number of steps, one short
                    raise known_bug(two_things(hint, _off_by_one(max_new_tokens)))
                raise known_bug(hint)
    cut = [b for b, row in enumerate(got[:, 1:].tolist()) if eos_id not in row and len(row) < max_new_tokens]
    if cut:
        ended = [row.index(eos_id) for row in got[:, 1:].tolist() if eos_id in row]  # where each ended row ended
        if ended and all(end == got.size(1) - 2 for end in ended):  # nothing ended before the last step
            raise known_bug(
                f"rows {cut} stop after {got.size(1) - 1} tokens without <eos>: the loop stopped as soon as ONE row "
                "produced eos_id. Stop when EVERY row has; until then the others are still being written[[: if finished.all(): break]]"
            )
        if got.size(1) - 1 == max_new_tokens - 1:
            raise known_bug(_off_by_one(max_new_tokens))
        raise ExerciseError(
            f"rows {cut} end after {got.size(1) - 1} tokens without <eos>: keep generating until a row produces "
            f"eos_id or max_new_tokens = {max_new_tokens} tokens"
        )


_NO_CAUSAL_HINT = (
    "no causal mask: pass a causal mask over the tokens so far as tgt_mask[[: causal_mask(ys.size(1))]]. The model was trained with it; without it "
    "earlier positions attend to later ones, and in a multi-layer decoder that changes the last "
    "position's output too"
)


def _greedy_bugs(fed_one_token: bool) -> list[tuple[str, dict[str, Any], bool]]:
    """The decoding bugs ``_greedy`` reproduces: the hint, its knobs, and whether it is plausible for this answer.

    ``fed_one_token``: the learner gave the decoder one token at every call, which
    tells "tokens not fed back" apart from "the first position's logits".
    """
    return [
        (
            "the generated tokens are not fed back: the decoder input stays [bos] at every step. Append each new "
            "token to ys and decode the whole ys next step",
            dict(feed="bos"),
            fed_one_token,
        ),
        (
            "you use the logits of the FIRST position: that position only ever sees <bos>, so it "
            "predicts the same token every step. Take the last one[[: logits[:, -1]]]",
            dict(position=0),
            not fed_one_token,
        ),
        (
            "only the last token is fed to the decoder: it has no memory between calls, so feed the whole "
            "sequence so far (ys, (B, t)) and read the last position's logits",
            dict(feed="last"),
            True,
        ),
        (_NO_CAUSAL_HINT, dict(causal=False), True),
        (
            "src_mask is not used: pass it to model.encode and to model.decode, so that no query attends to the "
            "padding at the end of the shorter sources",
            dict(use_src_mask=False),
            True,
        ),
        (
            "the softmax runs over the wrong axis (dim=1 is the positions): the vocabulary is the last axis, "
            "dim=-1. For greedy decoding no softmax is needed at all: argmax of the logits is the same token",
            dict(softmax_dim=1),
            True,
        ),
    ]


def _greedy_case(
    fn: Callable[..., torch.Tensor],
    model: nn.Module,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    max_new_tokens: int,
    seen: Inputs,
) -> None:
    """Run the answer on one batch; keep its rows (to <eos>) beside those of each decoding bug on the same batch."""
    originals = {"src": src.clone(), "src_mask": src_mask.clone()}
    inputs = {"src": src.clone(), "src_mask": src_mask.clone()}
    spy = _DecodeSpy(model)
    try:
        got = call_answer(
            fn, model, inputs["src"], inputs["src_mask"], max_new_tokens, _DEC_BOS, _DEC_EOS, hint=_GREEDY_HINT
        )
    finally:
        spy.close()
    expect_unchanged(originals, inputs)
    expected = greedy_decode(model, src, src_mask, max_new_tokens, _DEC_BOS, _DEC_EOS)  # (B, 1 + L)
    _check_greedy_structure(got, src.size(0), max_new_tokens, _DEC_BOS, _DEC_EOS, expected)
    got_rows, want_rows = _rows_until_eos(got.long(), _DEC_EOS), _rows_until_eos(expected, _DEC_EOS)
    if got_rows != want_rows:
        torch.manual_seed(1)  # another seed: a deterministic decoder gives the same answer again
        again = call_answer(
            fn, model, src.clone(), src_mask.clone(), max_new_tokens, _DEC_BOS, _DEC_EOS, hint=_GREEDY_HINT
        )
        if isinstance(again, torch.Tensor) and _rows_until_eos(again.long(), _DEC_EOS) != got_rows:
            raise known_bug(
                "two runs with the same input gave different outputs: are you sampling (torch.multinomial, "
                "Categorical(...).sample()) instead of taking the argmax? Greedy decoding is deterministic"
            )
    fed_one_token = bool(spy.calls) and all(tgt.size(1) == 1 for tgt, _ in spy.calls)

    def rows(**knobs) -> list[list[int]]:
        return _rows_until_eos(_greedy(model, src, src_mask, max_new_tokens, _DEC_BOS, _DEC_EOS, **knobs), _DEC_EOS)

    bugs = [
        (hint, functools.partial(rows, **knobs)) for hint, knobs, plausible in _greedy_bugs(fed_one_token) if plausible
    ]
    differs = functools.partial(_unexplained, src, max_new_tokens, got_rows, want_rows, spy.calls)
    seen.compare(got_rows, want_rows, bugs, "the rows", same=operator.eq, differs=differs)


def _unexplained(
    src: torch.Tensor, max_new_tokens: int, got_rows: list[list[int]], want_rows: list[list[int]], calls: list
) -> ExerciseError:
    """Rows that no decoding bug explains: no causal mask if the decoder never got one, else the first difference.

    ``calls`` is what :class:`_DecodeSpy` recorded: the decoder's inputs and whether a tgt_mask came with them.
    """
    if calls and not any(has_mask for _, has_mask in calls):
        return known_bug(_NO_CAUSAL_HINT)
    b = next(i for i, (g, w) in enumerate(zip(got_rows, want_rows)) if g != w)
    t = next(
        (i for i, (g, w) in enumerate(zip(got_rows[b], want_rows[b])) if g != w),
        min(len(got_rows[b]), len(want_rows[b])),
    )
    return ExerciseError(
        f"row {b} differs from decode.greedy_decode at generated token {t}: expected {want_rows[b]}, got "
        f"{got_rows[b]} (max_new_tokens={max_new_tokens}, bos_id={_DEC_BOS}, eos_id={_DEC_EOS}, source {src[b].tolist()}). "
        "Each step decodes all of ys with a causal mask and appends the argmax of the last position's logits"
        "[[: logits = model.decode(memory, src_mask, ys, causal_mask(ys.size(1))), "
        "next_token = logits[:, -1].argmax(dim=-1)]]"
    )


@exercise(
    "greedy_decode",
    "encode once, start every row with bos_id, then up to max_new_tokens times: decode everything generated so far "
    "with a causal mask and append the argmax of the LAST position's logits; finished rows get eos_id",
    prepare=_decoding_model,  # trained once, before the "still checking" clock starts
)
def check_greedy_decode(fn: Callable[..., torch.Tensor]) -> str:
    """Check a greedy decoder (what ``decode.greedy_decode`` does; paper §6.1 decodes with a beam, greedy is beam 1).

    Expected signature: ``fn(model, src, src_mask, max_new_tokens, bos_id, eos_id) -> LongTensor (B, 1 + L)``:

    * the source is encoded once (re-encoding it every step gives the same answer, only slower);
    * every row starts with ``bos_id``; each step feeds *all* tokens so far to
      ``model.decode(memory, src_mask, ys, causal_mask(t))`` and appends the
      argmax of the last position's logits;
    * a row that has produced ``eos_id`` is finished and receives ``eos_id``
      from then on; the loop stops when every row is finished, or after
      ``max_new_tokens`` steps (so ``L <= max_new_tokens``; running all ``max_new_tokens`` steps is fine);
    * the result equals ``decode.greedy_decode(model, src, src_mask, max_new_tokens,
      bos_id, eos_id)`` row by row up to each row's first ``eos_id`` (after it, only ``eos_id``).

    The model is a small Transformer half-trained to copy, with ids ``<pad>`` 0,
    ``<bos>`` 1, ``<eos>`` 2 (not the course vocabulary's), run on six padded
    sources and on one source with a tight ``max_new_tokens``.

    Shape:
        src ``(B, S)``, src_mask ``(B, 1, 1, S)`` bool -> ``(B, 1 + L)``, ``L <= max_new_tokens``.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (generated tokens not fed back, only
            the last token fed, first position's logits, argmax/softmax over the
            wrong axis, no causal mask, src_mask ignored, sampling instead of
            argmax, tokens written after ``<eos>``, stopping when the first row
            ends, the ``<bos>`` column missing, off-by-one lengths).
    """
    model = _decoding_model().eval()  # eval again: a learner's code may have switched it to train mode
    seen = Inputs()  # a bug is named only if it explains both batches
    for src, src_mask, max_new_tokens in _decoding_cases():
        with seen.one():
            _greedy_case(fn, model, src, src_mask, max_new_tokens, seen)
    seen.verdict()
    return "6 padded sources and a tight max_new_tokens against decode.greedy_decode, <eos> handling, deterministic"
