# Sourced (from the checkout's root) by the benchmarks that run on the device tool's GPU machine, which has no
# internet: the wheels in .whl/ (pytest-json-report, pytest-metadata) installed into a folder of their own, this
# checkout first on PYTHONPATH (nothing is installed), ncu and compute-sanitizer on PATH.
site=/tmp/grader-site
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl \
    || exit 2
fi
export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}" PATH="/usr/local/cuda/bin:$PATH" PYTHONUNBUFFERED=1
