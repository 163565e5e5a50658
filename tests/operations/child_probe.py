"""A module the child template runs as `python -m tests.operations.child_probe ...` (tests/operations/
test_child_template.py): it reports what a forked child sees, then does what its arguments say."""

from __future__ import annotations

import json
import os
import sys
import time

if __name__ == "__main__":
    action = sys.argv[1] if len(sys.argv) > 1 else ""
    if action == "wait-for-go":
        print("went" if sys.stdin.readline() == "go\n" else "no go", flush=True)
    print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "probe": os.environ.get("PROBE", ""),
                      "pgid": os.getpgid(0), "pid": os.getpid(), "ppid": os.getppid(),
                      "torch": "torch" in sys.modules}), flush=True)
    if action == "sleep":
        time.sleep(600)
    if action == "raise":
        raise ValueError("the probe raised")
    sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 and action == "exit" else 0)
