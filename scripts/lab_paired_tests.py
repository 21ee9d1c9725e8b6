"""Notebook 14's BLEU comparisons on one test set, each with sacreBLEU's paired test over the test sentences.

    .venv/bin/python scripts/lab_paired_tests.py          # writes results/since_2017/paired_tests.json

Every pair below translated the same 1,000 sentences of test_2016_flickr, and each is compared sentence by sentence
with sacreBLEU's approximate randomization test (``scripts/paired_test.py``, 10,000 trials): is the BLEU difference
more than the test set's own noise? The lab's options are paired with the baseline run of the same seed (they shared
their start: same initial weights, same batches), the warm-up runs with the run of the same norm on the usual
schedule, and the course's retrained model (``results/cpu_rotary/``) with the first one (``results/cpu/``).

The test measures the noise of the *test set* only. Two seeds of one recipe differ too, by more (notebook 14, §7), so
a small p here says that these two runs differ on these sentences, not that the change beats the seeds' noise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

from transformer_lessons import data

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("paired_test", ROOT / "scripts" / "paired_test.py")
_paired = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_paired)  # scripts/paired_test.py: sacreBLEU's test, as the course's model was tested
SPLIT, TRIALS, paired_test, read_lines = _paired.SPLIT, _paired.TRIALS, _paired.paired_test, _paired.read_lines
LAB = "results/since_2017"
PAIRS = [  # (question, baseline run folder, system run folder), folders relative to the repository root
    *[
        ("option vs its seed's baseline", f"{LAB}/baseline_s{seed}", f"{LAB}/{name}")
        for seed, names in (
            (0, ("pre-norm", "rmsnorm", "swiglu", "gqa-2", "mqa", "rotary", "bf16", "average-2")),
            (1, ("rotary_s1", "bf16_s1")),
            (2, ("rotary_s2", "bf16_s2")),
        )
        for name in names
    ],
    *[
        ("warm-up schedule vs the usual one", f"{LAB}/{norm}_usual", f"{LAB}/{norm}_{schedule}")
        for norm in ("post-norm", "pre-norm")
        for schedule in ("no-ramp", "no-warmup", "4x-rate")
    ],
    ("the retrained model vs the first", "results/cpu", "results/cpu_rotary"),
]


def run_all(trials: int = TRIALS) -> dict:
    """Every pair of :data:`PAIRS`, tested on the same sentences: a list of sacreBLEU's results, one per pair."""
    references = [en for _, en in data.load_split(SPLIT, progress=False)]
    tests = []
    for question, baseline, system in PAIRS:
        found = paired_test(
            read_lines(ROOT / baseline / "test_hypotheses.txt"),
            read_lines(ROOT / system / "test_hypotheses.txt"),
            references,
            trials,
        )
        tests.append({"question": question, "baseline": baseline, "system": system, **found})
        print(
            f"{Path(system).name:20s} vs {Path(baseline).name:16s} BLEU {found['system_bleu']:6.2f} against "
            f"{found['baseline_bleu']:6.2f} ({found['difference']:+.2f}), p = {found['p_value']:.4f}"
        )
    return {"split": SPLIT, "trials": trials, "note": __doc__.split("\n\n")[-1].strip(), "tests": tests}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=ROOT / LAB / "paired_tests.json", help="where to write them")
    parser.add_argument("--trials", type=int, default=TRIALS)
    args = parser.parse_args(argv)
    record = run_all(args.trials)
    args.json.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
