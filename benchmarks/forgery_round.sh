#!/usr/bin/env bash
# Issue 47's GPU round, one device call: the attacks on the timer and the grade, and honest timings before and after,
# side by side on one machine. Each step's output goes to $OUT/<step>.txt; never changes the GPU's clocks or settings.
#
#   bash benchmarks/forgery_round.sh STEP...
#
# Steps:
#   env          who the sandbox user is, whether the drop to it is active, Triton's and torch's versions
#   fresh        fresh_samples.py: ways of timing fresh work per launch, side by side
#   attacks      the GPU timing attacks (tests/e2e/test_gpu_timing_hostile.py, both tests) on this checkout
#   attacks47    issue 47's four attacks alone (the second test of that file)
#   forged       grader grade of tests/hostile/forges_kernels_at_import.py on cuda (its honest score is 0)
#   identical    identical_timings.py --copies 2 on this checkout (the reference and a slow variant, timed in a batch)
#   base-*       the same step in .baseline/ (the commit before, unpacked there: `git archive b8d9887 | tar -x -C
#                .baseline`), e.g. base-attacks, base-identical
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${OUT:-/tmp/forgery-round}
mkdir -p "$out"
for step in "$@"; do
  started=$(date +%s)
  where=$root
  name=$step
  if [[ $step == base-* ]]; then where=$root/.baseline; name=${step#base-}; fi
  (
    cd "$where" || exit 2
    source benchmarks/gpu_env.sh
    case "$name" in
      env)
        id; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
        python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
        runuser -u nobody -- env HOME=/ PYTHONPATH="$PWD" python3 -c "import torch, triton, grader.running.worker.harness" \
          && echo "drop to nobody: active" || echo "drop to nobody: not active" ;;
      fresh) python3 benchmarks/fresh_samples.py ;;
      attacks) python3 -m pytest -m gpu -p no:cacheprovider -s -rA -n 0 tests/e2e/test_gpu_timing_hostile.py ;;
      attacks47) python3 -m pytest -m gpu -p no:cacheprovider -s -rA -n 0 \
        tests/e2e/test_gpu_timing_hostile.py::test_forged_work_and_kernels_change_no_leaderboard_entry ;;
      forged)
        rm -rf /tmp/forged && mkdir -p /tmp/forged && cp tests/hostile/forges_kernels_at_import.py /tmp/forged/fused_layers.py
        python3 -m grader grade /tmp/forged/fused_layers.py --assignment fused_layers --backend cuda --seed 3 \
          --out /tmp/forged/out
        python3 -c "import json; g = json.load(open('/tmp/forged/out/grade.json')); print(g['score'], '/', g['max_score']); print(sorted({(c['target'], t) for c in g['cases'] for t in c['traps']})); print([(p['perf_id'], p['status']) for p in g['performance']])" ;;
      identical) python3 benchmarks/identical_timings.py --copies 2 --workers 4 ;;
      *) echo "unknown step $step"; exit 2 ;;
    esac
  ) > "$out/$step.txt" 2>&1
  echo "$step: exit $? after $(( $(date +%s) - started )) s" | tee -a "$out/steps.txt"
done
