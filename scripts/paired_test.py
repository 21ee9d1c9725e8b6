"""Is one system's test BLEU better than another's beyond the test set's noise? sacreBLEU's paired test.

    .venv/bin/python scripts/paired_test.py results/cpu_rotary/test_hypotheses.txt results/cpu_dropout/test_hypotheses.txt \
        --json results/cpu_dropout/paired_test.json

Both files translate test_2016_flickr (1,000 sentences, one per line) and are compared on the same sentences with
sacreBLEU's approximate randomization test (``--paired-ar``, 10,000 trials; Riezler and Maxwell 2005), the test
sacreBLEU recommends for comparing two systems: the p-value is the chance of a difference at least this large if the
two systems' outputs were exchangeable sentence by sentence. It measures the noise of the test set only, not that of
training: two runs of one recipe with different seeds differ too (the laptop preset's three seeds: s.d. 0.19).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from transformer_lessons import data

SPLIT = "test_2016_flickr"
TRIALS = 10_000


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def paired_test(baseline: list[str], system: list[str], references: list[str], trials: int = TRIALS) -> dict:
    """BLEU of each, their difference and the approximate randomization p-value (system against baseline)."""
    if not len(baseline) == len(system) == len(references):
        raise SystemExit(f"{len(baseline)}, {len(system)} and {len(references)} lines: translate the same test set")
    test = PairedTest(
        [("baseline", baseline), ("system", system)],
        {"BLEU": BLEU()},
        [references],
        test_type="ar",
        n_samples=trials,
    )
    _, results = test()
    base, other = results["BLEU"]
    return {
        "split": SPLIT,
        "sentences": len(references),
        "test": f"approximate randomization, {trials} trials (sacreBLEU --paired-ar)",
        "baseline_bleu": base.score,
        "system_bleu": other.score,
        "difference": other.score - base.score,
        "p_value": other.p_value,
        "signature": _signature(system, references),
    }


def _signature(system: list[str], references: list[str]) -> str:
    metric = BLEU()
    metric.corpus_score(system, [references])  # sacreBLEU knows the number of references only after a score
    return str(metric.get_signature())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", type=Path, help="the baseline's test hypotheses, one line per sentence")
    parser.add_argument("system", type=Path, help="the system compared with it")
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument("--trials", type=int, default=TRIALS)
    args = parser.parse_args(argv)
    references = [en for _, en in data.load_split(SPLIT, progress=False)]
    result = {
        "baseline": str(args.baseline),
        "system": str(args.system),
        **paired_test(read_lines(args.baseline), read_lines(args.system), references, args.trials),
    }
    print(
        f"{args.system}: BLEU {result['system_bleu']:.2f} against {result['baseline_bleu']:.2f} "
        f"({result['difference']:+.2f}), p = {result['p_value']:.4f} ({result['test']})"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
