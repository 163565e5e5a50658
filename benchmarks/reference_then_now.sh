#!/usr/bin/env bash
# Issue 47's "the reference's timings within ±3% of b8d9887's", in one short device call: two byte-identical copies
# of the fused_layers reference graded in one batch by .baseline/ (`git archive b8d9887 | tar -x -C .baseline`), then
# by this checkout, on the same warm GPU, both read by this checkout's identical_timings.py (--grader); each run's
# "time reference <case> reference median" lines are the comparison. Output: $OUT/reference-base.txt, $OUT/reference-now.txt. Never changes the GPU's clocks or settings.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/reference-then-now}
mkdir -p "$out"
here=$PWD
for run in base now; do
  where=$PWD; [ "$run" = base ] && where=$PWD/.baseline
  started=$(date +%s)
  (cd "$where" && source benchmarks/gpu_env.sh && cd "$here" \
     && python3 benchmarks/identical_timings.py reference/fused_layers/reference.py --copies 2 --workers 2 \
          --grader "$where") \
    > "$out/reference-$run.txt" 2>&1
  echo "$run: exit $? after $(( $(date +%s) - started )) s"
  grep "^time \|worst spread" "$out/reference-$run.txt"
done
