"""A training run's progress bar: tqdm's (a widget in a notebook, text in a terminal), or a silent stand-in.

Besides the loss and the learning rate (set by :func:`~transformer_lessons.run.run_epoch`), the bar shows
what a learner watching a run wants to know: the last validation BLEU, and the minutes a time limit leaves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformer_lessons.run_state import Run, TrainState


def progress_bar():
    """``tqdm.auto.tqdm``, or a silent stand-in where tqdm is not installed (a bare GPU box)."""
    try:
        from tqdm.auto import tqdm

        return tqdm
    except ImportError:

        class _Silent:
            def __init__(self, *args, **kwargs):
                pass

            def update(self, n=1):
                pass

            def set_postfix(self, **kwargs):
                pass

            def close(self):
                pass

        return _Silent


def bar_extras(run: Run, state: TrainState) -> dict[str, str]:
    """The progress bar's other fields: the last validation BLEU, and the minutes left of a time limit."""
    extras = {}
    bleus = [h["val_bleu"] for h in state.history if h.get("val_bleu") is not None]
    if bleus:
        extras["val_BLEU"] = f"{bleus[-1]:.1f}"
    if run.config.max_minutes is not None:
        extras["left"] = f"{max(run.config.max_minutes - state.train_time_s / 60, 0):.1f} min"
    return extras


__all__ = ["bar_extras", "progress_bar"]
