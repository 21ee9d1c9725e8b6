"""The confidence signal against translation quality, and on captions of another collection.

``plot_signal_vs_quality`` draws what ``scripts/measure_confidence.py`` recorded
(:func:`transformer_lessons.records.confidence_record`): on the left each test translation
as a dot, its signal (mean log-probability per token) across, its chrF against the
reference up; on the right the signals of the Flickr test captions beside those of MS COCO's
captions, the threshold on both.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

FLICKR, MSCOCO = "#1c7ed6", "#e8590c"  # blue and orange: apart for the colour-blind as well


def plot_signal_vs_quality(record: dict) -> Figure:
    """Two panels: signal against chrF for the Flickr test translations; Flickr's and MS COCO's signals.

    Args:
        record: :func:`transformer_lessons.records.confidence_record`.

    Returns:
        The Figure.
    """
    quality, threshold = record["quality"], record["threshold"]
    flickr, mscoco = quality["test_2016_flickr"], quality["test_2017_mscoco"]
    signal, chrf = np.array(record["signals"]["test"]), np.array(flickr["chrf"])
    other = np.array(mscoco["signals"])
    low = float(min(signal.min(), other.min())) - 0.05  # both panels share the signal's range
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained", width_ratios=(1.2, 1))
    flagged = signal < threshold
    left.scatter(signal[~flagged], chrf[~flagged], s=8, alpha=0.5, color=FLICKR, label="not flagged")
    left.scatter(signal[flagged], chrf[flagged], s=14, marker="x", color="#c92a2a", label="flagged")
    left.axvline(threshold, color="black", linestyle="--", linewidth=1, label=f"threshold {threshold:.3f}")
    left.set(
        xlabel="signal: mean log-probability per output token",
        ylabel="chrF of the translation (sentence)",
        xlim=(low, 0.02),
        ylim=(0, 100),
        title=f"{len(signal)} test captions: Spearman {flickr['spearman_signal_chrf']:.2f}",
    )
    left.legend(loc="lower right", fontsize=8)
    left.grid(alpha=0.3)
    bins = np.linspace(low, 0, 41)
    for name, values, colour in (
        (f"Flickr test ({len(signal)})", signal, FLICKR),
        (f"MS COCO test ({mscoco['n']})", other, MSCOCO),
    ):
        right.hist(values, bins=bins, density=True, alpha=0.6, color=colour, label=name)
    right.axvline(threshold, color="black", linestyle="--", linewidth=1)
    right.set(
        xlabel="signal: mean log-probability per output token",
        xlim=(low, 0.02),
        ylabel="share of captions (density)",
        title=f"captions of two collections: AUROC {quality['auroc_flickr_vs_mscoco']:.2f}",
    )
    right.legend(fontsize=8)
    right.grid(alpha=0.3)
    return fig


__all__ = ["plot_signal_vs_quality"]
