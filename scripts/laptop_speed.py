"""Training steps per second of variants of the cpu preset's model on this CPU (results/laptop/speed_pilot.txt).

Each variant takes 5 untimed steps, then steps for 25 s on the cpu preset's batches, in bfloat16 autocast with 2
threads. The rates turn the laptop preset's 10 minutes into the update counts of the GPU pilots (laptop_pilots.py).

    python scripts/laptop_speed.py [VARIANT ...]
"""

import sys
import time
import torch
from transformer_lessons.config import get_train_config
from transformer_lessons.run import build_run, prepare_corpus_for
from transformer_lessons.train import train_step
from pathlib import Path

torch.set_num_threads(2)
t = time.perf_counter()
corpus = prepare_corpus_for("cpu", progress=False)
print("corpus", round(time.perf_counter() - t, 1), "s", flush=True)
base = get_train_config("cpu").replace(precision="bfloat16")
variants = {
    "cpu2048": {},
    "cpu1024": {"max_tokens": 1024},
    "cpu3072": {"max_tokens": 3072},
    "ff1024": {"model": base.model.replace(d_ff=1024)},
    "L2": {"model": base.model.replace(n_layers=2)},
    "L4": {"model": base.model.replace(n_layers=4)},
    "d384": {"model": base.model.replace(d_model=384, d_ff=768)},
}
for name in sys.argv[1:] or variants:
    c = base.replace(**variants[name])
    run = build_run(c, corpus, Path("/tmp/x"), torch.device("cpu"))
    it = iter(run.batcher)
    for _ in range(5):
        train_step(
            run.step_model, next(it).to(run.device), run.criterion, run.optimizer, run.scheduler, 1.0, run.autocast
        )
    n = 0
    t = time.perf_counter()
    steps = 0
    while time.perf_counter() - t < 25:
        b = next(it)
        n += b.n_tokens
        train_step(run.step_model, b.to(run.device), run.criterion, run.optimizer, run.scheduler, 1.0, run.autocast)
        steps += 1
    dt = time.perf_counter() - t
    print(
        f"{name}: {n / dt:,.0f} tok/s  {steps / dt:.2f} steps/s  params {run.model.num_parameters():,}  batches/epoch {len(run.batcher)}",
        flush=True,
    )
