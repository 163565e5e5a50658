#!/usr/bin/env bash
# What profiling costs and whether it disturbs the timing (one device call, ~9 minutes on an H100/H200):
# 1. the two timing-fidelity GPU tests (reference timed with plausible numbers; forged timings) as in the suite,
#    once with each timed case profiled and once with --no-profile (a copy of the tests with the flag added);
# 2. a cuda grade of the small-tiles matmul mutant (its report: a named performance trap and the roofline);
# 3. the reference graded warm (calibration, compile cache and reference profile cached) with and without
#    profiling, in turn, twice each: the extra seconds a grade pays for its profile.
# Everything goes to $OUT (or /tmp/profile-cost). Never changes the GPU's clocks or settings.
#
#   bash benchmarks/profile_cost_gpu.sh [--skip-tests]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/profile-cost}
mkdir -p "$out"
source benchmarks/gpu_env.sh
export GRADER_CACHE_DIR=/tmp/profile-cost-cache
started=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv | tee "$out/gpu.txt"
tests=(tests/e2e/test_gpu_timing_hostile.py tests/e2e/test_gpu_performance.py::test_reference_is_timed_with_plausible_numbers)
if [ "${1:-}" != --skip-tests ]; then
  rm -rf /tmp/noprof && mkdir /tmp/noprof && cp -r . /tmp/noprof/ 2>/dev/null
  sed -i 's/"--backend", "cuda"\]/"--backend", "cuda", "--no-profile"]/' /tmp/noprof/tests/e2e/test_gpu_timing_hostile.py
  sed -i 's/            "cuda",$/            "cuda", "--no-profile",/' /tmp/noprof/tests/e2e/test_gpu_performance.py
  grep -c -- "--no-profile" /tmp/noprof/tests/e2e/test_gpu_timing_hostile.py /tmp/noprof/tests/e2e/test_gpu_performance.py \
    | tee -a "$out/tests.log"
  for mode in profiled unprofiled; do
    dir=$PWD; [ "$mode" = unprofiled ] && dir=/tmp/noprof
    t0=$(date +%s)
    (cd "$dir" && PYTHONPATH="$dir:$site" python3 -m pytest -m gpu -n 2 -s -q -p no:cacheprovider "${tests[@]}" 2>&1) \
      | grep -E "honest|patches|side-stream|leaves|caches|passed|failed|Error|assert" | tee -a "$out/tests.log"
    echo "$mode: $(( $(date +%s) - t0 )) s" | tee -a "$out/tests.log"
  done
fi
grade() {  # name file extra-args...
  local name=$1 file=$2; shift 2
  local t0; t0=$(date +%s%N)
  timeout 200 python3 -m grader grade "$file" --assignment fused_layers --backend cuda --seed 3 \
    --out "/tmp/pc/$name" "$@" > "/tmp/pc/$name.log" 2>&1
  local rc=$?
  printf '%s: exit %s, %s ms; %s\n' "$name" "$rc" "$(( ($(date +%s%N) - t0) / 1000000 ))" \
    "$(python3 -c "import json,sys; g=json.load(open('/tmp/pc/$name/grade.json')); print(g['score'], '/', g['max_score'], sorted({t.get('trap') or t.get('id') or str(t) for t in g.get('performance_traps', [])}), 'execution', g['execution_time_s'], 's')" 2>&1 | tail -1)" \
    | tee -a "$out/grades.log"
}
mkdir -p /tmp/pc
python3 -m grader mutant linear_small_tiles --assignment fused_layers --write /tmp/pc >/dev/null
grade small-tiles /tmp/pc/linear_small_tiles.py
tar -czf "$out/report-small-tiles.tgz" -C /tmp/pc small-tiles small-tiles.log 2>/dev/null
ref=reference/fused_layers/solution.py
[ -f "$ref" ] || ref=$(ls reference/fused_layers/*.py | head -1)
grade ref-warmup "$ref"
for i in 1 2; do
  grade "ref-profiled-$i" "$ref"
  grade "ref-unprofiled-$i" "$ref" --no-profile
done
for name in ref-profiled-1 ref-unprofiled-1; do
  python3 - "$name" <<'PY' | tee -a "$out/grades.log"
import json, sys
g = json.load(open(f"/tmp/pc/{sys.argv[1]}/grade.json"))
print(sys.argv[1], "phases:", json.dumps(g["phases"])[:1500])
PY
done
echo "profile_cost_gpu: done after $(( $(date +%s) - started )) s" | tee -a "$out/grades.log"
