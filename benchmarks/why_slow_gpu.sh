#!/usr/bin/env bash
# Why slow, on a GPU (one device call, ~8 minutes on an H200): whether an unprivileged user may read the counters
# here, ncu's CSV for the project's submissions (benchmarks/ncu_record.py), the judge's verdicts on it
# (benchmarks/ncu_verdicts.py), then `grader selftest --assignment softmax --backend cuda --timed` (the grade path:
# profiled replays in the sandbox) with the time that is left. Everything goes to $OUT (or /tmp/why-slow):
# gpu.txt, ncu-record.log, ncu-verdicts.md, ncu-profiles.tgz, report-mm.tgz (a matmul mutant's cuda report),
# selftest-timed.log. Never changes the GPU's clocks or settings.
#
#   bash benchmarks/why_slow_gpu.sh [SECONDS_FOR_THE_RECORDING]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/why-slow}
mkdir -p "$out"
source benchmarks/gpu_env.sh
started=$(date +%s)
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv; ncu --version
  grep -i RmProfilingAdminOnly /proc/driver/nvidia/params; } 2>&1 | tee "$out/gpu.txt"
cat > /tmp/why-slow-tiny.py <<'PY'
import torch
x = torch.ones(1 << 20, device="cuda")
torch.cuda.synchronize(); torch.cuda.profiler.start(); y = x * 2; torch.cuda.synchronize(); torch.cuda.profiler.stop()
print("tiny ok")
PY
chmod 755 /tmp/why-slow-tiny.py
for who in nobody root; do
  run=(); [ "$who" = nobody ] && run=(setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp)
  (cd /tmp && timeout 120 "${run[@]}" ncu --profile-from-start off --clock-control none --csv \
     --metrics dram__bytes_read.sum python3 /tmp/why-slow-tiny.py 2>&1 | tail -4) | sed "s/^/as $who: /" \
     | tee -a "$out/gpu.txt"
done
timeout "${1:-220}" python3 benchmarks/ncu_record.py --out /tmp/ncu --jobs 6 2>&1 | tee "$out/ncu-record.log"
echo "ncu_record: exit ${PIPESTATUS[0]} after $(( $(date +%s) - started )) s" | tee -a "$out/ncu-record.log"
python3 benchmarks/ncu_verdicts.py /tmp/ncu --all > "$out/ncu-verdicts.md" 2>&1; cat "$out/ncu-verdicts.md"
tar -czf "$out/ncu-profiles.tgz" -C /tmp ncu
# A student's report with the roofline: the broadcast-sum matmul mutant graded on cuda (its report and grade.json).
python3 -m grader mutant linear_broadcast_sum --assignment fused_layers --write /tmp/why-slow-mm >/dev/null && \
  timeout 150 python3 -m grader grade /tmp/why-slow-mm/linear_broadcast_sum.py --assignment fused_layers \
    --backend cuda --seed 3 --out /tmp/why-slow-mm/out 2>&1 | tail -5 | tee -a "$out/selftest-timed.log"
tar -czf "$out/report-mm.tgz" -C /tmp/why-slow-mm out 2>/dev/null
left=$(( 560 - ($(date +%s) - started) ))
echo "selftest --timed gets ${left} s"
if [ "$left" -gt 60 ]; then
  timeout "$left" python3 -m grader selftest --assignment softmax --backend cuda --timed --jobs 4 --seed 3 \
    2>&1 | tee -a "$out/selftest-timed.log"
fi
echo "why_slow_gpu: done after $(( $(date +%s) - started )) s"
