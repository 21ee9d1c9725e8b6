#!/usr/bin/env bash
# The `full` preset's GPU run in one command, on any machine with an NVIDIA GPU and PyTorch: the environment,
# the training run with its test evaluation, the fp16 export, then the training benchmark. From a copy of the
# repository (the package need not be installed: it runs with PYTHONPATH=.):
#
#   bash scripts/gpu_run.sh [MINUTES] [CORPUS]
#
#   MINUTES  training-time cap passed to --max-minutes (default 5). It counts training only, and
#            the whole run (a resumed run included); evaluation comes on top.
#   CORPUS   a corpus saved by `prepare --preset full` (default runs/multi30k_full.json.gz): the GPU
#            machine then needs neither spaCy nor the data files.
#
# Environment (all optional):
#   OUT          where the record goes (default gpu_out): $OUT/full, the files results/full/ commits
#   COMMIT       the commit recorded in command.txt (default: git rev-parse HEAD where .git exists)
#   BUDGET       seconds the whole command may take, for machines that stop a job after a fixed time:
#                training is then interrupted (Ctrl-C, which saves last.pt) 45 s before the end and
#                best.pt is scored instead, and the benchmark runs only with time left. Unset: no limit.
#   DEVICE       default cuda
#   BENCH_STEPS  default 100; 0 skips the benchmark. BENCH_COMPILE=1 adds torch.compile's figures
#   RUN_DIR      default runs/full (last.pt, best.pt: not committed)
#   TRAIN_ARGS   extra train options. A small dry run on a CPU, as tests/test_cli.py does:
#                DEVICE=cpu BENCH_STEPS=0 TRAIN_ARGS="--epochs 1 --beam 1" with a tiny corpus
#
# What it writes in $OUT/full: train.log (everything printed here), command.txt, metrics.json,
# history.json, test_hypotheses.txt, model_fp16.pt, bench_train.txt. results/README.md says how the
# committed run was made and what each file is.
# No pip install here: it would replace the machine's CUDA torch with the pinned CPU one.
set -uo pipefail
cd "$(dirname "$0")/.."

MINUTES="${1:-5}"
CORPUS="${2:-runs/multi30k_full.json.gz}"
BUDGET="${BUDGET:-}"
DEVICE="${DEVICE:-cuda}"
BENCH_STEPS="${BENCH_STEPS:-100}"
TRAIN_ARGS="${TRAIN_ARGS:-}"
OUT="${OUT:-gpu_out}"
if [ -z "${COMMIT:-}" ] && git rev-parse HEAD >/dev/null 2>&1; then
    COMMIT="$(git rev-parse HEAD)$(git diff --quiet HEAD || echo +uncommitted)"
fi
RUN="${RUN_DIR:-runs/full}"
DEST="$OUT/full"
export PYTHONPATH=. PYTHONUNBUFFERED=1

mkdir -p "$RUN" "$DEST"
# Everything printed from here on goes to the screen, runs/full/train.log and $OUT/full/train.log
# (written as it happens, so a job stopped at a machine's time limit still leaves its log).
exec > >(tee -a "$RUN/train.log" "$DEST/train.log") 2>&1
TEE=$!
trap 'exec >&- 2>&-; wait "$TEE"' EXIT  # let tee write the last lines before the command returns
# Seconds left of BUDGET; without one, a number larger than any run, so every `timeout` below never fires.
left() { if [ -n "$BUDGET" ]; then echo $((BUDGET - SECONDS)); else echo 999999; fi; }

echo "== gpu_run.sh $(date -u +%Y-%m-%dT%H:%M:%SZ), commit ${COMMIT:-unknown}, budget ${BUDGET:-none}${BUDGET:+ s}, --max-minutes $MINUTES"
if [ ! -f "$CORPUS" ]; then
    echo "no corpus at $CORPUS: make it where spaCy is (prepare --preset full --out $CORPUS) and carry it along"
    exit 2
fi
echo "corpus: $CORPUS, $(wc -c < "$CORPUS") bytes, sha256 $(sha256sum "$CORPUS" | cut -d' ' -f1)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"
python3 - <<'EOF'
import platform, sys
import sacrebleu, torch
gpu = f"{torch.cuda.get_device_name(0)}, capability {torch.cuda.get_device_capability(0)}" if torch.cuda.is_available() else "no CUDA device"
print(f"python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda}), sacrebleu {sacrebleu.__version__}; {gpu}")
EOF

TRAIN=(python3 -m transformer_lessons train --preset full --corpus "$CORPUS" --out "$RUN" --max-minutes "$MINUTES" --device "$DEVICE" --quiet)
# shellcheck disable=SC2206  # TRAIN_ARGS is split into words on purpose
TRAIN+=($TRAIN_ARGS)
BENCH=(python3 benchmarks/bench_train.py --device "$DEVICE" --preset full --corpus "$CORPUS" --steps "$BENCH_STEPS")
# BENCH_COMPILE=1 also times both models under torch.compile (a minute or two of compiling on a GPU).
if [ "${BENCH_COMPILE:-0}" = 1 ]; then BENCH+=(--compile); fi
{
    echo "commit: ${COMMIT:-unknown}"
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "environment: PYTHONPATH=. PYTHONUNBUFFERED=1"
    echo "corpus: $CORPUS, sha256 $(sha256sum "$CORPUS" | cut -d' ' -f1)"
    echo "train: ${TRAIN[*]}"
    echo "export: python3 -c 'from transformer_lessons.checkpoint import export_for_inference; export_for_inference(\"$RUN/best.pt\", \"$DEST/model_fp16.pt\")'"
    echo "bench: ${BENCH[*]}"
} > "$DEST/command.txt"

# Training and its test evaluation. With a BUDGET, a backstop for a slower machine than planned:
# Ctrl-C (SIGINT) 45 s before the budget ends; train() then saves last.pt, and the best checkpoint
# is scored on the test set below instead.
limit=$(($(left) - 45))
if [ -n "$BUDGET" ]; then echo "== train (${SECONDS} s in; stopped by SIGINT after $limit s if still running)"; else echo "== train (${SECONDS} s in)"; fi
timeout -s INT -k 15 "$((limit > 1 ? limit : 1))" "${TRAIN[@]}"
status=$?
echo "== train exited with $status (${SECONDS} s in)"
if [ ! -f "$RUN/metrics.json" ] || [ "$status" -ne 0 ]; then
    if [ -f "$RUN/best.pt" ] && [ "$(left)" -gt 20 ]; then
        echo "== no fresh metrics.json: scoring best.pt on test_2016_flickr (beam 4)"
        timeout -k 5 "$(($(left) - 10))" python3 -m transformer_lessons evaluate --checkpoint "$RUN/best.pt" --corpus "$CORPUS" \
            --device "$DEVICE" --json "$DEST/test_eval.json" --output "$DEST/test_hypotheses.txt"
    fi
fi

for f in metrics.json history.json test_hypotheses.txt; do
    if [ -f "$RUN/$f" ] && [ "$status" -eq 0 ]; then cp "$RUN/$f" "$DEST/"; fi
done
[ "$status" -ne 0 ] && [ -f "$RUN/history.json" ] && cp "$RUN/history.json" "$DEST/"
if [ -f "$RUN/best.pt" ]; then
    python3 -c "import sys; from transformer_lessons.checkpoint import export_for_inference as e; print('model_fp16.pt:', e(sys.argv[1], sys.argv[2]), 'bytes')" \
        "$RUN/best.pt" "$DEST/model_fp16.pt"
fi

if [ "$BENCH_STEPS" -gt 0 ] && [ "$(left)" -gt 60 ]; then
    echo "== bench_train (${SECONDS} s in)"
    timeout -k 5 "$(($(left) - 10))" "${BENCH[@]}" > "$DEST/bench_train.txt" 2>&1
    echo "bench_train exited with $? ($DEST/bench_train.txt)"
    cat "$DEST/bench_train.txt"
else
    echo "== no bench_train (BENCH_STEPS=$BENCH_STEPS${BUDGET:+, $(left) s left of the budget})"
fi
echo "== done in ${SECONDS} s; in $DEST: $(cd "$DEST" && ls | tr '\n' ' ')"
# 0 when training finished or the backstop stopped it (124, and the log says so); 1 when it failed.
[ "$status" -eq 0 ] || [ "$status" -eq 124 ] || exit 1
