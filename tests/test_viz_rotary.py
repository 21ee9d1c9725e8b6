"""Notebook 14's rotary picture: the arrows are apply_rotary's output, the angles and dot products shown are right."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_lessons import viz  # noqa: E402
from transformer_lessons.rotary import apply_rotary  # noqa: E402

POSITIONS = ((3, 1), (10, 8), (7, 1))
Q, K = (1.0, 0.0), (0.69, -0.4)


def _by_gid(ax, gid: str):
    found = [a for a in ax.texts if a.get_gid() == gid]
    assert len(found) == 1, f"{gid}: {len(found)} artists"
    return found[0]


def _rotated(pair2: tuple[float, float], position: int, d_head: int = 64, pair: int = 4) -> np.ndarray:
    """The pair after apply_rotary, computed here on a random vector around it (the other pairs must not matter)."""
    x = torch.randn(1, d_head)
    x[0, 2 * pair : 2 * pair + 2] = torch.tensor(pair2)
    return apply_rotary(x, start=position)[0, 2 * pair : 2 * pair + 2].numpy()


@pytest.fixture(scope="module")
def figure():
    fig = viz.plot_rotary_pairs(POSITIONS, Q, K)
    yield fig
    plt.close(fig)


def test_the_arrows_are_apply_rotarys_vectors(figure):
    assert len(figure.axes) == len(POSITIONS)
    for ax, (m, n) in zip(figure.axes, POSITIONS):
        np.testing.assert_allclose(_by_gid(ax, "query").xy, _rotated(Q, m), atol=1e-6)
        np.testing.assert_allclose(_by_gid(ax, "key").xy, _rotated(K, n), atol=1e-6)
        np.testing.assert_allclose(_by_gid(ax, "query_start").xy, Q, atol=1e-6)
        np.testing.assert_allclose(_by_gid(ax, "key_start").xy, K, atol=1e-6)
        assert f"m = {m}, n = {n}: m − n = {m - n}" in ax.get_title()


def test_the_angles_shown_are_the_start_angle_plus_the_distance_times_theta(figure):
    theta = math.degrees(10000 ** (-8 / 64))  # pair 4 of a head of size 64, degrees per position
    start = math.degrees(math.atan2(Q[1], Q[0]) - math.atan2(K[1], K[0]))  # from k to q before rotation
    shown = []
    for ax, (m, n) in zip(figure.axes, POSITIONS):
        expected = (start + (m - n) * theta) % 360
        assert _by_gid(ax, "angle").get_text() == f"{expected:.0f}°"
        shown.append(_by_gid(ax, "angle").get_text())
        dot = float(_rotated(Q, m) @ _rotated(K, n))
        assert math.isclose(dot, math.hypot(*Q) * math.hypot(*K) * math.cos(math.radians(expected)), abs_tol=1e-5)
        assert _by_gid(ax, "dot").get_text().endswith(f"= {dot:.3f}")
    assert shown[0] == shown[1] != shown[2]  # the same distance at two places, then another distance
    assert "18.1°" in figure._suptitle.get_text()
