"""The committed measurements notebook 15 draws, read from the package (so that Colab has them too).

Two scripts measure the course's model and write a record to ``results/`` and the same file
into the package's ``data/`` folder (a test keeps the two equal):

* ``scripts/measure_heads.py`` -> ``results/heads/results.json`` = ``data/heads_record.json``:
  each head off on its own on 100 test sentences, with sacreBLEU's paired bootstrap per head,
  the pruning curve in importance order and in random orders, on those sentences and on the
  next 100 (which chose nothing);
* ``scripts/measure_confidence.py`` -> ``results/confidence/results.json`` =
  ``data/confidence_record.json``: the confidence signal of every test caption, of 67
  sentences that are not captions and of the 461 MS COCO captions, with each translation's chrF.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from transformer_lessons.heads import Head, HeadImportance, PruningCurve, head_from_text

DATA = Path(__file__).resolve().parent / "data"
HEADS_FILE = DATA / "heads_record.json"
CONFIDENCE_FILE = DATA / "confidence_record.json"


def _read(path: Path, script: str) -> dict:
    if not path.exists():
        raise FileNotFoundError(f"{path.name} is missing from the package: reinstall it, or run {script}")
    return json.loads(path.read_text())


@dataclass(frozen=True)
class HeadsRecord:
    """``results/heads/``: what each head costs, whether that beats the noise, and pruning in several orders.

    Attributes:
        importance: each head off on its own (the chosen sample: the first 100 test sentences).
        p_values: ``{head: p}`` of sacreBLEU's paired bootstrap, that head off against every head on.
        pruning: the heads off together in importance order, on the chosen sample.
        random: the same in random orders, on the chosen sample.
        held_out_pruning, held_out_random: the same two on the next 100 sentences, which chose nothing.
        record: the whole record, as written.
    """

    importance: HeadImportance
    p_values: dict[Head, float]
    pruning: PruningCurve
    random: list[PruningCurve]
    held_out_pruning: PruningCurve
    held_out_random: list[PruningCurve]
    record: dict


def heads_record() -> HeadsRecord:
    """The course model's committed head measurement (:class:`HeadsRecord`)."""
    record = _read(HEADS_FILE, "scripts/measure_heads.py")
    held = record["held_out"]
    return HeadsRecord(
        importance=HeadImportance.from_dict(record["importance"]),
        p_values={head_from_text(k): v["p"] for k, v in record["paired_bootstrap"]["heads"].items()},
        pruning=PruningCurve.from_dict(record["pruning"]),
        random=[PruningCurve.from_dict(curve) for curve in record["random_pruning"]],
        held_out_pruning=PruningCurve.from_dict(held["importance_order"]),
        held_out_random=[PruningCurve.from_dict(curve) for curve in held["random"]],
        record=record,
    )


def confidence_record() -> dict:
    """The course model's committed confidence measurement, as ``scripts/measure_confidence.py`` wrote it."""
    return _read(CONFIDENCE_FILE, "scripts/measure_confidence.py")


__all__ = ["CONFIDENCE_FILE", "HEADS_FILE", "HeadsRecord", "confidence_record", "heads_record"]
