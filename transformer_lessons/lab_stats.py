"""Telling a difference from noise in notebook 14's lab: tests that fit the number of runs, at equal updates.

A lab run is one draw from a noisy process: another seed gives another score. The baseline ran with three
seeds (``lab.SEEDS``), rotary and bf16 with three too, the other options once. So:

* one run against ``n`` baseline runs: is it outside what another baseline run could give? The difference from
  the baseline mean has a standard error of ``s * sqrt(1 + 1/n)`` (``s`` the baseline runs' standard deviation,
  itself estimated from ``n`` runs), and the t distribution with ``n - 1`` degrees of freedom: 2, with 3 seeds.
  Dividing by ``s`` as if it were known (a "z" of 3.2) overstates the evidence.
* ``m`` runs against ``n``: the two-sample t-test with the pooled standard deviation, ``m + n - 2`` degrees of
  freedom. It assumes both sides vary alike. Welch's t (:func:`welch`) does not: each side keeps its own variance,
  and the degrees of freedom (Welch–Satterthwaite) fall when one side is much noisier, so its p-value is the
  cautious one when the two spreads differ.

Both give a 95% interval for the difference and a two-sided p-value. Two measures are compared: test BLEU after
the same training *time* (what the lab's table shows: a faster change makes more updates), and validation loss
after the same number of *updates* (:func:`val_loss_at`), where seeds differ far less, so smaller differences show.
The t distribution is computed here (the regularised incomplete beta function, by its continued fraction), so
the course needs no SciPy.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (modified Lentz's method)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return result


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularised incomplete beta function, for 0 <= x <= 1."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_p_value(t: float, df: float) -> float:
    """Two-sided p-value of Student's t: P(|T| >= |t|) with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    return _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def t_critical(df: float, level: float = 0.95) -> float:
    """The ``t`` with ``P(|T| >= t) = 1 - level``: the half-width of a ``level`` interval in standard errors."""
    low, high = 0.0, 1e6
    for _ in range(200):  # bisection: the p-value falls as t grows
        middle = (low + high) / 2
        low, high = (middle, high) if t_p_value(middle, df) > 1 - level else (low, middle)
    return (low + high) / 2


@dataclass(frozen=True)
class Difference:
    """``b - a`` with its 95% interval, t, degrees of freedom and two-sided p-value; ``n`` the runs on each side."""

    difference: float
    low: float
    high: float
    t: float
    df: float
    p: float
    n: tuple[int, int]

    def __str__(self) -> str:
        return (
            f"{self.difference:+.3g} [{self.low:+.3g}, {self.high:+.3g}], "
            f"t = {self.t:.2f} ({self.df:.3g} df), p = {self.p:.2g}, runs {self.n[1]} vs {self.n[0]}"
        )


def difference(a: Sequence[float], b: Sequence[float]) -> Difference:
    """How far runs ``b`` are from runs ``a`` (``b - a``), beside the noise that the runs themselves show.

    ``a`` needs two runs or more (its spread is the noise). One run in ``b``: the test of a new observation
    against a sample (standard error ``s_a * sqrt(1 + 1/n_a)``, ``n_a - 1`` df). Two or more: the pooled
    two-sample t-test (``n_a + n_b - 2`` df).
    """
    a, b = [float(v) for v in a], [float(v) for v in b]
    if len(a) < 2 or not b:
        raise ValueError(
            f"need two runs or more on the reference side and one or more on the other, got {len(a)}, {len(b)}"
        )
    diff = statistics.fmean(b) - statistics.fmean(a)
    if len(b) == 1:
        df = len(a) - 1
        se = statistics.stdev(a) * math.sqrt(1 + 1 / len(a))
    else:
        df = len(a) + len(b) - 2
        pooled = ((len(a) - 1) * statistics.variance(a) + (len(b) - 1) * statistics.variance(b)) / df
        se = math.sqrt(pooled * (1 / len(a) + 1 / len(b)))
    return _tested(diff, se, df, (len(a), len(b)))


def _tested(diff: float, se: float, df: float, n: tuple[int, int]) -> Difference:
    """The difference with its standard error and degrees of freedom, made into a t, an interval and a p-value."""
    t = diff / se if se > 0 else math.copysign(math.inf, diff) if diff else 0.0
    half = t_critical(df) * se
    p = t_p_value(t, df) if math.isfinite(t) else 0.0
    return Difference(diff, diff - half, diff + half, t, df, p, n)


def welch(a: Sequence[float], b: Sequence[float]) -> Difference:
    """Welch's t-test of ``b - a``: like :func:`difference` for two runs or more a side, without assuming that both
    sides vary alike.

    The standard error is ``sqrt(s_a²/n_a + s_b²/n_b)``; the degrees of freedom are Welch–Satterthwaite's,
    ``se⁴ / ((s_a²/n_a)² / (n_a - 1) + (s_b²/n_b)² / (n_b - 1))``: ``n_a + n_b - 2`` when the two sides vary alike
    and have as many runs (the pooled test's), down to ``n - 1`` of the noisier side when it dominates.
    """
    a, b = [float(v) for v in a], [float(v) for v in b]
    if len(a) < 2 or len(b) < 2:
        raise ValueError(
            f"Welch's t needs two runs or more on each side (each its own variance), got {len(a)}, {len(b)}"
        )
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if va + vb > 0 else len(a) + len(b) - 2
    return _tested(statistics.fmean(b) - statistics.fmean(a), se, df, (len(a), len(b)))


def paired(a: Sequence[float], b: Sequence[float]) -> Difference:
    """The paired t-test of ``b - a``: ``a[i]`` and ``b[i]`` share a seed (the same batches), so each pair's
    difference is one observation, and the spread that the two sides share cancels.

    Standard error ``s_d / sqrt(n)`` (``s_d`` the standard deviation of the ``n`` differences), ``n - 1`` df.
    """
    a, b = [float(v) for v in a], [float(v) for v in b]
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"the paired test needs two pairs or more, as many on each side, got {len(a)}, {len(b)}")
    gaps = [y - x for x, y in zip(a, b)]
    return _tested(
        statistics.fmean(gaps), statistics.stdev(gaps) / math.sqrt(len(gaps)), len(gaps) - 1, (len(a), len(b))
    )


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values, in the order given, for ``m`` tests made together.

    The smallest p is multiplied by ``m``, the next by ``m - 1``, and so on; each adjusted p is at least the one
    before it (in sorted order) and at most 1. Rejecting where the adjusted p is below 0.05 keeps the chance of
    any false finding among the ``m`` below 0.05.
    """
    m = len(p_values)
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda j: p_values[j])):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def paired_by_seed(lab: dict, option: str, measure: Callable[[dict], float]) -> Difference:
    """``option``'s runs against the baseline runs of the same seeds (``rotary`` with ``baseline_s0``, ``rotary_s1``
    with ``baseline_s1``, ...), by :func:`paired`; ``measure`` reads a run's number."""
    runs = {r["name"]: r for r in lab["runs"]}
    seeds = [s for s in range(10) if (option if s == 0 else f"{option}_s{s}") in runs and f"baseline_s{s}" in runs]
    base = [measure(runs[f"baseline_s{s}"]) for s in seeds]
    return paired(base, [measure(runs[option if s == 0 else f"{option}_s{s}"]) for s in seeds])


def val_loss_at(run: dict, step: int) -> float | None:
    """The run's validation loss after exactly ``step`` updates (its history's evaluation there), else None."""
    return next((h["val_loss"] for h in run.get("history", []) if h["step"] == step), None)


def option_of(name: str) -> str:
    """The option a run measures: its name without a seed suffix (``rotary_s1`` -> ``rotary``, ``baseline_s0`` ->
    ``baseline``)."""
    head, _, tail = name.rpartition("_s")
    return head if head and tail.isdigit() else name


def common_step(runs: Sequence[dict]) -> int:
    """The most updates at which every run of ``runs`` was evaluated: where they compare at equal updates."""
    steps = [{h["step"] for h in r.get("history", [])} for r in runs if not r.get("diverged")]
    shared = set.intersection(*steps) if steps else set()
    if not shared:
        raise ValueError("these runs share no evaluation step: they cannot be compared at equal updates")
    return max(shared)


def options(lab: dict) -> dict[str, list[dict]]:
    """The runs of the lab's options table (``options`` and ``seeds``), grouped by option (seeds pooled)."""
    by_option: dict[str, list[dict]] = {}
    for run in lab["runs"]:
        if run.get("group", "options") in ("options", "seeds") and not run.get("diverged"):
            by_option.setdefault(option_of(run["name"]), []).append(run)
    if len(by_option.get("baseline", [])) < 2:
        raise ValueError("the lab needs two baseline seeds or more: their spread is the noise")
    return by_option


def compare_options(
    lab: dict, test: Callable[[Sequence[float], Sequence[float]], Difference] = difference, runs_at_least: int = 1
) -> dict[str, dict[str, Difference | None]]:
    """Every option (its seeds pooled) against the baseline's seeds, on two measures:

    ``"test BLEU"`` after the lab's equal training time, and ``"val loss"`` after equal updates
    (:func:`common_step`). None where a measure does not apply: checkpoint averaging changes
    the weights only after the last epoch, so its loss during training is the baseline's own.
    ``test`` is :func:`difference` or :func:`welch`; options with fewer than ``runs_at_least`` runs are left out
    (Welch's t needs 2).
    """
    by_option = options(lab)
    base = by_option.pop("baseline")
    step = common_step([r for runs in options(lab).values() for r in runs])
    out: dict[str, dict[str, Difference | None]] = {}
    for option, its in by_option.items():
        if len(its) < runs_at_least:
            continue
        at_end_only = any("average_last" in r.get("changes", {}) for r in its)
        out[option] = {
            "test BLEU": test([r["test_bleu"] for r in base], [r["test_bleu"] for r in its]),
            "val loss": None
            if at_end_only
            else test([val_loss_at(r, step) for r in base], [val_loss_at(r, step) for r in its]),
        }
    return out
