#!/usr/bin/env bash
# One device call of named steps, on a machine with a CUDA GPU (the device tool's H100/H200 image): each step's
# output goes to $OUT/<step>.txt (or /tmp/gpu-round). Never changes the GPU's clocks or settings.
#
#   bash benchmarks/gpu_round.sh profile selftest:softmax ...
#
# Steps:
#   profile             grading_time.py --backend cuda --repeat 1 --profile: the per-phase split of one grade and check
#   bars                grading_time.py --backend cuda --repeat 2 --check --profile: issue 37's bars
#   selftest:<id>[:a,b] grader selftest --assignment <id> --backend cuda --timed --jobs 4 (every mutant's measured
#                       traps; only submissions a and b when listed)
#   seeds:<id>          grader selftest --assignment <id> --backend cuda --seeds 5 --seed 3 --jobs 4 (untimed: every
#                       mutant named and every variant clean at five seeds, e.g. issue 39's attention)
#   ncu:<id>[:a,b]      ncu_record.py --assignment <id> (only the reference and a, b when listed), then ncu_verdicts.py
#                       on it; the recording in $OUT/ncu-<id>.tgz (fixtures for tests/data)
#   imports             zygote_imports.py: the zygote's imports, Triton's first launch with empty/warm/helper caches
#   class[:a,b,...]     class_batch.py --workers 10 --seed 3 (a class of 60), then the arguments given, split at commas
#                       (class:--phases,--workers,16,--copies,1,--limit-s,480: the per-phase table with 16 workers,
#                       stopped at 480 s with what was graded by then)
#   identical           identical_timings.py (byte-identical files timed in one batch: the spread per case)
#   fresh               fresh_samples.py: ways of timing fresh work per launch, side by side (issue 47)
#   spin                timing_spin_up.py: a small kernel's medians from idle, with and without the spin-up
#   watch               memory_watch_cost.py: the memory watch's time per sample with 1, 4 and 16 GiB held, and an
#                       honest kernel's time with and without it
#   pytest:<path>       pytest -m gpu -s -rA on one test file or node (e.g. an attack's test)
#   ci:<passes>         bash .ci/gpu with GPU_PASSES=<passes> ("1", "2" or "1 2"; its log is $OUT/gpu-tests.log)
#   grade:<file>        grader grade FILE --assignment fused_layers --backend cuda --seed 3 (results printed)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu-round}
mkdir -p "$out"
source benchmarks/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
for step in "$@"; do
  started=$(date +%s)
  # the GPU's memory in use every 0.5 s while the step runs: its peak goes to steps.txt
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits -lms 500 > "$out/memory.csv" 2>/dev/null &
  watcher=$!
  case "$step" in
    profile) python3 benchmarks/grading_time.py --backend cuda --repeat 1 --profile ;;
    bars) python3 benchmarks/grading_time.py --backend cuda --repeat 2 --check --profile ;;
    selftest:*)
      spec=${step#selftest:}; id=${spec%%:*}; only=()
      if [ "$spec" != "$id" ]; then IFS=, read -ra names <<< "${spec#*:}"; for n in "${names[@]}"; do only+=(--only "$n"); done; fi
      python3 -m grader selftest --assignment "$id" --backend cuda --timed --jobs 4 --seed 3 "${only[@]}" ;;
    seeds:*) python3 -m grader selftest --assignment "${step#seeds:}" --backend cuda --seeds 5 --seed 3 --jobs 4 ;;
    ncu:*)
      spec=${step#ncu:}; id=${spec%%:*}; only=()
      if [ "$spec" != "$id" ]; then IFS=, read -ra names <<< "${spec#*:}"; for n in "${names[@]}"; do only+=(--only "$n"); done; fi
      rm -rf "/tmp/ncu-$id" && python3 benchmarks/ncu_record.py --out "/tmp/ncu-$id" --assignment "$id" --jobs 4 "${only[@]}" \
        && python3 benchmarks/ncu_verdicts.py "/tmp/ncu-$id" --all; tar -czf "$out/ncu-$id.tgz" -C /tmp "ncu-$id" ;;
    imports) python3 benchmarks/zygote_imports.py ;;
    class) python3 benchmarks/class_batch.py --workers 10 --seed 3 ;;
    class:*) IFS=, read -ra extra <<< "${step#class:}"; python3 benchmarks/class_batch.py --workers 10 --seed 3 "${extra[@]}" ;;
    identical) python3 benchmarks/identical_timings.py ;;
    fresh) python3 benchmarks/fresh_samples.py ;;
    watch) python3 benchmarks/memory_watch_cost.py ;;
    spin) python3 benchmarks/timing_spin_up.py ;;
    ci:*) OUT=$out GPU_PASSES="${step#ci:}" bash .ci/gpu ;;
    pytest:*) python3 -m pytest -m gpu -p no:cacheprovider -s -rA -n 0 "${step#pytest:}" ;;
    grade:*) python3 -m grader grade "${step#grade:}" --assignment fused_layers --backend cuda --seed 3 --out "/tmp/gpu-grade-$$" && python3 -c "import json,sys; g=json.load(open('/tmp/gpu-grade-$$/grade.json')); print(g['score'], [(t['case_id'], t['score'], t.get('traps')) for t in g['cases']][:50]); print([(p['perf_id'], p['status'], p.get('speedup_vs_reference'), p.get('reason','')[:200]) for p in g['performance']])" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac > "$out/${step//[:\/,]/_}.txt" 2>&1
  status=$?
  kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null
  peak=$(sort -t, -k1 -n "$out/memory.csv" 2>/dev/null | tail -1)
  echo "$step: exit $status after $(( $(date +%s) - started )) s; GPU memory peak (used, total MiB): ${peak:-unread}" \
    | tee -a "$out/steps.txt"
done
