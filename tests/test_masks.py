"""Masks: bool, True = may attend, shapes that broadcast to (B, H, T, S)."""

from __future__ import annotations

import pytest
import torch

from transformer_lessons.masks import causal_mask, padding_mask, target_mask

PAD = 0


@pytest.mark.parametrize("size", [1, 2, 5, 17])
def test_causal_mask_equals_lower_triangle(size: int) -> None:
    mask = causal_mask(size)
    assert mask.dtype == torch.bool
    assert mask.shape == (size, size)
    # Independent reference: position t sees s iff s <= t.
    expected = torch.tril(torch.ones(size, size)) == 1
    assert torch.equal(mask, expected)
    for t in range(size):
        for s in range(size):
            assert bool(mask[t, s]) == (s <= t)


def test_causal_mask_diagonal_is_true() -> None:
    assert causal_mask(6).diagonal().all()


def test_causal_mask_device_argument() -> None:
    assert causal_mask(3, device="cpu").device.type == "cpu"


def test_padding_mask_shape_and_values() -> None:
    tokens = torch.tensor([[5, 6, 7, PAD, PAD], [8, PAD, PAD, PAD, PAD], [1, 2, 3, 4, 9]])
    mask = padding_mask(tokens, PAD)
    assert mask.dtype == torch.bool
    assert mask.shape == (3, 1, 1, 5)
    expected = [[True, True, True, False, False], [True, False, False, False, False], [True] * 5]
    assert mask[:, 0, 0, :].tolist() == expected


def test_padding_mask_respects_pad_id() -> None:
    tokens = torch.tensor([[0, 3, 3, 1]])
    assert padding_mask(tokens, 3)[0, 0, 0].tolist() == [True, False, False, True]


def test_padding_mask_broadcasts_over_heads_and_queries() -> None:
    tokens = torch.tensor([[5, 6, PAD], [7, PAD, PAD]])
    mask = padding_mask(tokens, PAD)
    scores = torch.zeros(2, 4, 3, 3)  # (B, H, T, S)
    full = mask.expand_as(scores)
    # Every head and every query sees the same keys.
    assert torch.equal(full[:, :, 1], full[:, :, 0])
    assert full[1, 3, 2].tolist() == [True, False, False]


def test_target_mask_is_and_of_padding_and_causal() -> None:
    tokens = torch.tensor([[4, 5, 6, PAD], [4, PAD, PAD, PAD]])
    mask = target_mask(tokens, PAD)
    assert mask.dtype == torch.bool
    assert mask.shape == (2, 1, 4, 4)
    for b in range(2):
        for t in range(4):
            for s in range(4):
                expected = (s <= t) and bool(tokens[b, s] != PAD)
                assert bool(mask[b, 0, t, s]) == expected, (b, t, s)


def test_target_mask_broadcasts_to_scores() -> None:
    tokens = torch.tensor([[4, 5, PAD]])
    scores = torch.randn(1, 8, 3, 3)  # (B, H, T, T)
    filled = scores.masked_fill(~target_mask(tokens, PAD), float("-inf"))
    assert filled.shape == scores.shape
    assert torch.isinf(filled[0, :, 0, 1]).all()  # future key
    assert torch.isinf(filled[0, :, 2, 2]).all()  # padding key
    assert torch.isfinite(filled[0, :, 1, :2]).all()
