"""Run a script under Triton's interpreter in a fresh Python (the fence and the traffic counters install
themselves into the interpreter module once per process) and read the JSON its last line prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from tests.conftest import ROOT


def run_interpreted(script: str) -> Any:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update(TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
