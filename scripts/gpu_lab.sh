#!/usr/bin/env bash
# The lab of scripts/since_2017.py at the `full` preset on one GPU, its runs five at a time: the model is small and
# launch-bound, so five processes share the GPU without waiting much on each other (each run's tokens/s is what it
# got beside the four others). From a copy of the repository:
#
#   bash scripts/gpu_lab.sh [MINUTES] [CORPUS]
#
#   MINUTES  training time of each run of the options (default 1.25); the warm-up runs get 0.6 of it
#   CORPUS   a corpus saved by `prepare --preset full` (default runs/multi30k_full.json.gz)
#
# Environment: OUT (default gpu_out; the record goes to $OUT/since_2017_full), DEVICE (default cuda).
# No pip install here: it would replace the machine's CUDA torch with the pinned CPU one.
set -uo pipefail
cd "$(dirname "$0")/.."
MINUTES="${1:-1.25}"
CORPUS="${2:-runs/multi30k_full.json.gz}"
OUT="${OUT:-gpu_out}"
DEVICE="${DEVICE:-cuda}"
DEST="$OUT/since_2017_full"
export PYTHONPATH=. PYTHONUNBUFFERED=1
mkdir -p "$DEST/parts"
WARMUP_MINUTES=$(python3 -c "print(round(0.6 * $MINUTES, 2))")
echo "== gpu_lab.sh $(date -u +%Y-%m-%dT%H:%M:%SZ), commit ${COMMIT:-unknown}, $MINUTES min a run" | tee "$DEST/lab.log"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee -a "$DEST/lab.log"
GROUPS_=(
    "baseline_s0 rotary"
    "baseline_s1 pre-norm rmsnorm"
    "baseline_s2 swiglu gqa-2"
    "mqa bf16 average-2"
    "post-norm_no-warmup pre-norm_no-warmup post-norm_4x-rate pre-norm_4x-rate"
)
i=0
for group in "${GROUPS_[@]}"; do
    # shellcheck disable=SC2086  # the group is split into names on purpose
    python3 scripts/since_2017.py --preset full --device "$DEVICE" --corpus "$CORPUS" --minutes "$MINUTES" \
        --warmup-minutes "$WARMUP_MINUTES" --out "$DEST/parts/$i" --runs runs/since_2017_full --only $group \
        > "$DEST/part_$i.log" 2>&1 &
    echo "part $i (pid $!): $group" | tee -a "$DEST/lab.log"
    i=$((i + 1))
done
wait
echo "== all parts ended ($SECONDS s)" | tee -a "$DEST/lab.log"
python3 scripts/since_2017.py --merge "$DEST"/parts/* --out "$DEST" 2>&1 | tee -a "$DEST/lab.log"
rm -rf "$DEST/parts"
