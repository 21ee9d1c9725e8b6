"""The pilots that chose the `laptop` preset (results/laptop/pilots_gpu.json): short runs on one GPU, as update counts.

Each pilot trains a variant of the cpu preset's model on the cpu preset's corpus for the number of epochs that the
course's 2-core CPU makes in the time (its rates: scripts/laptop_speed.py, results/laptop/speed_pilot.txt): L* for the
10 minutes of the laptop preset, C* for the 90 of the course's model. All run at once, one process each, sharing the
GPU; every epoch's history is gathered into $OUT/summary.json, so a run cut short still reports.

    python -m transformer_lessons prepare --preset cpu --out .carry/multi30k_cpu.json.gz   # here
    PYTHONPATH=$PWD python3 scripts/laptop_pilots.py 470                                  # there: seconds to run
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(os.environ.get("OUT", "/tmp/out"))
WORK = Path(os.environ.get("PILOT_WORK", "/tmp/pilots"))
SMOKE = os.environ.get("PILOT_SMOKE") == "1"

P = {  # name: (changes to the cpu preset, model changes)
    "L1_noam": (dict(epochs=5, schedule="noam"), {}),
    "L2_end_w800": (dict(epochs=5, schedule="to_end"), {}),
    "L3_end_w300": (dict(epochs=5, schedule="to_end", warmup=300), {}),
    "L4_end_w300_f05": (dict(epochs=5, schedule="to_end", warmup=300, lr_factor=0.5), {}),
    "L5_end_w300_drop0": (dict(epochs=5, schedule="to_end", warmup=300), dict(dropout=0.0)),
    "L6_b1024_f05": (dict(epochs=4, schedule="to_end", warmup=400, lr_factor=0.5, max_tokens=1024), {}),
    "L7_b1024_f07": (dict(epochs=4, schedule="to_end", warmup=400, max_tokens=1024), {}),
    "L8_2layers": (dict(epochs=7, schedule="to_end", warmup=300), dict(n_layers=2)),
    "L9_4layers": (dict(epochs=4, schedule="to_end", warmup=300), dict(n_layers=4)),
    "L10_end_w300_f1": (dict(epochs=5, schedule="to_end", warmup=300, lr_factor=1.0), {}),
    "C1_current": (dict(epochs=40, schedule="noam", average_last=5, eval_every=10), {}),
    "C2_end_d01": (dict(epochs=40, schedule="to_end", average_last=5, eval_every=10), {}),
    "C3_end_d02": (dict(epochs=40, schedule="to_end", average_last=5, eval_every=10), dict(dropout=0.2)),
    "C4_end_d03": (dict(epochs=40, schedule="to_end", average_last=5, eval_every=10), dict(dropout=0.3)),
    "C5_end_d03_ff1024": (
        dict(epochs=28, schedule="to_end", average_last=5, eval_every=7),
        dict(dropout=0.3, d_ff=1024),
    ),
    "C6_end_d02_4layers": (
        dict(epochs=31, schedule="to_end", average_last=5, eval_every=8),
        dict(dropout=0.2, n_layers=4),
    ),
}

if os.environ.get("PILOT_ONLY"):
    P = {k: v for k, v in P.items() if k in os.environ["PILOT_ONLY"].split(",")}


def child(name: str) -> None:
    import torch
    from transformer_lessons.config import get_train_config
    from transformer_lessons.data import Corpus
    from transformer_lessons.run import train

    changes, model = P[name]
    base = get_train_config("cpu")
    changes = dict(changes)
    if name.startswith("L"):
        changes.setdefault("eval_every", changes["epochs"])
    c = base.replace(
        name=name,
        max_minutes=None,
        precision="bfloat16",
        bleu_val_limit=None,
        model=base.model.replace(**model),
        **changes,
    )
    corpus = Corpus.load(os.environ.get("PILOT_CORPUS", ".carry/multi30k_cpu.json.gz"))
    if SMOKE:
        c = c.replace(epochs=1, eval_every=1, limit=None)
        corpus.pairs["train"] = corpus.pairs["train"][:300]
        corpus.pairs["test_2016_flickr"] = corpus.pairs["test_2016_flickr"][:20]
        corpus.pairs["val"] = corpus.pairs["val"][:20]
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    t = time.time()
    r = train(c, corpus=corpus, out_dir=WORK / name, device=dev, resume=False, progress=False, log=True)
    (WORK / f"{name}.done.json").write_text(json.dumps({"seconds": time.time() - t, "metrics": r.get("metrics")}))


def collect() -> dict:
    res = {}
    for name in P:
        h = WORK / name / "history.json"
        d = WORK / f"{name}.done.json"
        res[name] = {
            "config": P[name],
            "history": json.loads(h.read_text()) if h.is_file() else None,
            "done": json.loads(d.read_text()) if d.is_file() else None,
        }
    return res


def main(deadline_s: float) -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    start = time.time()
    procs = {}
    for name in P:
        log = open(WORK / f"{name}.log", "w")
        procs[name] = subprocess.Popen(
            [sys.executable, __file__, "child", name],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=os.environ | {"OMP_NUM_THREADS": "1"},
        )
    while time.time() - start < deadline_s and any(p.poll() is None for p in procs.values()):
        time.sleep(10)
        (OUT / "summary.json").write_text(json.dumps(collect()))
    for p in procs.values():
        if p.poll() is None:
            p.kill()
    (OUT / "summary.json").write_text(json.dumps(collect()))
    tails = {n: (WORK / f"{n}.log").read_text()[-1500:] for n in P}
    (OUT / "logs.json").write_text(json.dumps(tails))
    print(f"done in {time.time() - start:.0f} s; exit codes", {n: p.poll() for n, p in procs.items()})


if __name__ == "__main__":
    if sys.argv[1] == "child":
        child(sys.argv[2])
    else:
        main(float(sys.argv[1]))
