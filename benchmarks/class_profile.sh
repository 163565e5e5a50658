#!/usr/bin/env bash
# Where a class batch's CPU goes inside its processes (issue 48: a grade costs 3-4x its CPU alone in a batch of 16,
# and the machine is CPU-bound before the GPU is busy). Starts benchmarks/class_batch.py with 16 workers, waits
# until the grades are under way, then samples every Python process under the batch with py-spy (carry .tools/,
# which holds its wheel: `pip download --no-deps -d .tools py-spy`) for DURATION seconds, and every process's CPU by
# command name (ptxas, python, ...) over the same interval (benchmarks/command_cpu.py). Never changes the GPU's clocks or settings.
#
#   bash benchmarks/class_profile.sh [WAIT_S] [DURATION_S] [CLASS_BATCH ARGS...]     # default 45 60
#   OMP_NUM_THREADS=1 bash benchmarks/class_profile.sh          # every grade's and worker's torch on one CPU thread
#
# Output: $OUT/class-stacks.txt.gz (py-spy's collapsed stacks: `python3 benchmarks/stacks_summary.py FILE`),
# $OUT/class-commands.txt (CPU seconds per command name over the interval), $OUT/class-gpu.txt (nvidia-smi dmon),
# $OUT/class-stacks-summary.txt, $OUT/class-profile-batch.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/class-profile}
mkdir -p "$out"
wait_s=${1:-45}
duration_s=${2:-60}
shift $(( $# < 2 ? $# : 2 ))
source benchmarks/gpu_env.sh
python3 -m pip install -q --no-index --no-deps --target /tmp/py-spy-site .tools/py_spy-*.whl || exit 2
spy=/tmp/py-spy-site/bin/py-spy
python3 benchmarks/class_batch.py --workers 16 --seed 3 --copies 1 --limit-s $((wait_s + duration_s + 10)) "$@" \
  > "$out/class-profile-batch.txt" 2>&1 &
batch=$!
sleep "$wait_s"
python3 benchmarks/command_cpu.py "$duration_s" > "$out/class-commands.txt" 2>&1 &
counting=$!
# the GPU's own view meanwhile: SM and memory utilisation every 5 s (is it idle while the CPUs are full?)
nvidia-smi dmon -s u -d 5 -c $((duration_s / 5)) > "$out/class-gpu.txt" 2>&1 &
"$spy" record --pid "$batch" --subprocesses --duration "$duration_s" --rate 20 --nonblocking --format raw \
  -o "$out/class-stacks.txt" > "$out/py-spy.log" 2>&1
wait "$counting"
wait "$batch"
tail -30 "$out/class-profile-batch.txt"
cat "$out/class-commands.txt" "$out/class-gpu.txt"
python3 benchmarks/stacks_summary.py "$out/class-stacks.txt" --top 30 > "$out/class-stacks-summary.txt" 2>&1
head -80 "$out/class-stacks-summary.txt"
gzip -f "$out/class-stacks.txt"  # a few MB of stacks: what comes back from a device call is limited
