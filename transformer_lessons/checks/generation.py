"""Check for the greedy loop of notebook 07: the trained model writes its output one token at a time.

At training time the decoder reads the true target (teacher forcing). At inference
there is none: the model starts from ``<bos>`` and feeds its own outputs back in.
The exercise is the loop itself, with a fixed number of steps (the copy task has no
end token); notebook 10's :func:`~transformer_lessons.checks.check_greedy_decode`
adds ``<eos>`` and finished rows. The reference is
:func:`transformer_lessons.decode.greedy_decode` with ``eos_id=None``. The model is
:mod:`.decoding`'s small Transformer half-trained to copy: its outputs depend on the
position, on the source and on every token fed back, so each loop bug below changes them.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch

from transformer_lessons.checks.common import (
    ExerciseError,
    call_answer,
    exercise,
    expect_tensor,
    expect_unchanged,
    known_bug,
    shape_of,
)
from transformer_lessons.checks.decoding import _DEC_BOS, _DEC_FIRST_SYMBOL, _DEC_VOCAB, _decoding_model, _DecodeSpy
from transformer_lessons.checks.evidence import Inputs
from transformer_lessons.decode import greedy_decode
from transformer_lessons.masks import causal_mask

_LOOP_HINT = (
    "each step: decode everything written so far, take the scores at the LAST position, (B, V), and their argmax "
    "over the vocabulary, one token per row, (B,); append it to ys as a new column"
    "[[: logits = model.decode(memory, None, ys, causal_mask(ys.size(1))); "
    "ys = torch.cat([ys, logits[:, -1].argmax(dim=-1)[:, None]], dim=1)]]"
)
_NO_CAUSAL = (
    "no causal mask in the decoder: at training time each position saw only the tokens before it. Without the "
    "mask, earlier positions now read later ones, and in a decoder of two or more layers that changes what the "
    "last position computes too. Pass a causal mask over the t tokens so far[[: causal_mask(ys.size(1))]]"
)


def _cases() -> list[tuple[torch.Tensor, int]]:
    """``(src, n_tokens)``: five sources of 7 symbols, copied; then two of 4 symbols, with 6 steps (more than the source)."""
    generator = torch.Generator().manual_seed(5)
    src = torch.randint(_DEC_FIRST_SYMBOL, _DEC_VOCAB, (5, 7), generator=generator)  # (B, S), no padding
    return [(src, 7), (src[:2, :4].clone(), 6)]


def _loop(model, src, n_tokens, bos_id, *, feed="all", position=-1, causal=True):
    """The greedy loop with knobs that reproduce the common bugs (defaults: the right loop)."""
    memory = model.encode(src, None)  # (B, S, D)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)  # (B, 1)
    for _ in range(n_tokens):
        inp = {"all": ys, "bos": ys[:, :1], "last": ys[:, -1:]}[feed]  # (B, t) or (B, 1)
        logits = model.decode(memory, None, inp, causal_mask(inp.size(1)) if causal else None)  # (B, t, V)
        ys = torch.cat([ys, logits[:, position].argmax(dim=-1)[:, None]], dim=1)  # (B, t + 1)
    return ys


# Each bug: its hint, the knobs of _loop that reproduce it, and whether the learner fed the decoder one token
# per call (None: either way). Reading <bos> alone and reading the first position give the same tokens; what
# the decoder was fed tells them apart.
_BUGS = [
    (
        "the tokens you generate are not fed back: the decoder reads only <bos> at every step, so it cannot know "
        "which position it is writing. Append each new token to ys and decode the whole of ys at the next step",
        dict(feed="bos"),
        True,
    ),
    (
        "the decoder reads only the last token: it keeps nothing between calls, so it must read the whole sequence "
        "so far (its self-attention reads the earlier tokens, its positional encodings count them)",
        dict(feed="last"),
        True,
    ),
    (
        "you take the scores of the FIRST position: that position only ever reads <bos>. The prediction of the next "
        "token is at the last position[[: logits[:, -1]]]",
        dict(position=0),
        False,
    ),
    (_NO_CAUSAL, dict(causal=False), None),
]


def _structure(got, B: int, n_tokens: int, bos_id: int, expected: torch.Tensor) -> torch.Tensor:
    """Type, dtype, shape and the <bos> column: what any answer must satisfy. Returns ``got``."""
    got = expect_tensor(got, "the result", finite=False)
    if got.is_floating_point() or got.dtype == torch.bool:
        raise ExerciseError(f"the result should hold token ids (dtype torch.long), got {got.dtype}")
    if got.dim() != 2 or got.size(0) != B:
        raise ExerciseError(f"the result should be (B, 1 + n_tokens) = ({B}, {1 + n_tokens}), got {shape_of(got)}")
    width = got.size(1) - 1  # tokens after the first column
    if width == n_tokens - 1 and torch.equal(got, expected[:, 1:]):
        raise known_bug("the <bos> column is missing: return ys with the bos_id it started with, (B, 1 + n_tokens)")
    if not bool((got[:, 0] == bos_id).all()):
        raise ExerciseError(f"every row must start with bos_id = {bos_id} (use the argument), got {got[:, 0].tolist()}")
    if width != n_tokens:
        more = "one step short" if width == n_tokens - 1 else f"{width} steps instead of {n_tokens}"
        raise known_bug(
            f"off by one: n_tokens = {n_tokens} asks for {n_tokens} new tokens after <bos>, you wrote {width} "
            f"({more}): one token per step, n_tokens steps[[: for _ in range(n_tokens)]]"
        )
    return got


def _loop_case(fn: Callable[..., torch.Tensor], model, src: torch.Tensor, n_tokens: int, seen: Inputs) -> None:
    """Run the answer on one set of sources; keep what it wrote beside what each loop bug writes from them."""
    originals, inputs = {"src": src.clone()}, {"src": src.clone()}
    spy = _DecodeSpy(model)
    try:
        got = call_answer(fn, model, inputs["src"], n_tokens, _DEC_BOS, hint=_LOOP_HINT)
    finally:
        spy.close()
    expect_unchanged(originals, inputs)
    expected = greedy_decode(model, src, None, n_tokens, _DEC_BOS)  # (B, 1 + n_tokens)
    got = _structure(got, src.size(0), n_tokens, _DEC_BOS, expected)
    if not torch.equal(got, expected):
        torch.manual_seed(1)  # another seed: a deterministic loop gives the same answer again
        again = call_answer(fn, model, src.clone(), n_tokens, _DEC_BOS, hint=_LOOP_HINT)
        if isinstance(again, torch.Tensor) and not torch.equal(again, got):
            raise known_bug(
                "two runs with the same input gave different outputs: are you sampling (torch.multinomial) instead "
                "of taking the most likely token? Greedy decoding is deterministic"
            )
    fed_one_token = bool(spy.calls) and all(tgt.size(1) == 1 for tgt, _ in spy.calls)
    # A bug that does not fit how this answer fed the decoder is listed as giving nothing (None): it is not this one.
    bugs = [
        (hint, functools.partial(_loop, model, src, n_tokens, _DEC_BOS, **knobs) if plausible else lambda: None)
        for hint, knobs, one_token in _BUGS
        for plausible in [one_token in (None, fed_one_token)]
    ]
    differs = functools.partial(_unexplained, got, expected, src, n_tokens, spy.calls)
    seen.compare(got, expected, bugs, "the result", same=_same_tokens, differs=differs)


def _same_tokens(got: torch.Tensor, tokens: torch.Tensor | None) -> bool:
    return tokens is not None and torch.equal(got, tokens)


def _unexplained(got: torch.Tensor, expected: torch.Tensor, src: torch.Tensor, n_tokens: int, calls) -> ExerciseError:
    """A wrong result that no loop bug explains: no causal mask if the decoder never got one, else the first difference."""
    if calls and not any(has_mask for _, has_mask in calls):
        return known_bug(_NO_CAUSAL)
    b = next(i for i in range(got.size(0)) if not torch.equal(got[i], expected[i]))
    t = int((got[b] != expected[b]).nonzero()[0])
    return ExerciseError(
        f"row {b} differs from decode.greedy_decode at column {t}: expected {expected[b].tolist()}, got "
        f"{got[b].tolist()} (n_tokens={n_tokens}, bos_id={_DEC_BOS}, source {src[b].tolist()}). {_LOOP_HINT}"
    )


@exercise(
    "greedy_loop",
    "start every row with bos_id; n_tokens times, let the model score the next token from everything written so "
    "far and append its most likely choice",
    prepare=_decoding_model,  # trained once, before the "still checking" clock starts
)
def check_greedy_loop(fn: Callable[..., torch.Tensor]) -> str:
    """Check a greedy decoding loop of a fixed length (what ``decode.greedy_decode`` does without ``eos_id``).

    Expected signature: ``fn(model, src, n_tokens, bos_id) -> LongTensor (B, 1 + n_tokens)``:
    encode the source (once, or every step: the same answer, only slower); start
    every row with ``bos_id``; then ``n_tokens`` times decode all tokens so far with
    a causal mask and append the argmax of the last position's logits. No padding,
    so no source mask. The result must equal
    ``decode.greedy_decode(model, src, None, n_tokens, bos_id)``.

    The model is a small Transformer half-trained to copy, whose ``<bos>`` is 1
    (not the course's 2), so a hard-coded ``BOS_ID`` is caught.

    Shape:
        src ``(B, S)`` -> ``(B, 1 + n_tokens)``.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (tokens not fed back, only the last
            token fed, the first position's logits, no causal mask, the ``<bos>``
            column missing, a step too few or too many, sampling instead of argmax).
    """
    model = _decoding_model().eval()  # eval again: a learner's code may have switched it to train mode
    seen = Inputs()  # a bug is named only if it explains both sets of sources
    for src, n_tokens in _cases():
        with seen.one():
            _loop_case(fn, model, src, n_tokens, seen)
    seen.verdict()
    return "7 sources against decode.greedy_decode, n_tokens shorter and longer than the source, deterministic"
