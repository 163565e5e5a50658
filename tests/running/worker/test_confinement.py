"""grader/running/worker/confinement.py: once the worker confines imports, student code can import neither the
grader (beyond what the worker keeps), nor the course's packages, and (best effort) opens no socket; what the
worker shares with the grader (the protocol, the evidence types) stays loaded. In a fresh Python: confinement
is for the whole process."""

from __future__ import annotations

from tests.running.worker.interpreted import run_interpreted

SCRIPT = """
import json, socket, sys
import grader.running.protocol, grader.running.cases.battery, grader.evidence.observation
from grader.running.worker.confinement import confine_imports

confine_imports()
found = {}
for name in ("grader.running.cases.battery", "grader.judging.judge", "assignments", "reference.softmax"):
    try:
        __import__(name)
        found[name] = "imported"
    except ImportError as exc:
        found[name] = str(exc)
try:
    socket.socket()
    found["socket"] = "opened"
except PermissionError as exc:
    found["socket"] = str(exc)
kept = [name in sys.modules for name in ("grader.running.protocol", "grader.evidence.observation")]
print(json.dumps({"found": found, "kept": kept, "gone": "grader.running.cases.battery" not in sys.modules}))
"""


def test_a_confined_worker_keeps_only_what_it_shares_with_the_grader() -> None:
    report = run_interpreted(SCRIPT)
    for name in ("grader.running.cases.battery", "grader.judging.judge", "assignments", "reference.softmax"):
        refused = report["found"][name]  # the first package on the way that is no longer loaded is refused
        assert refused.startswith("importing '") and refused.endswith("' is not allowed in a submission"), name
        assert name.startswith(refused.split("'")[1]), (name, refused)
    assert report["found"]["socket"] == "network access is not allowed in a submission"
    assert report["kept"] == [True, True] and report["gone"]


UNREADABLE = """
import json, pathlib, sys
from grader.running.worker.confinement import confine_imports

looked_into = pathlib.Path.is_dir


def is_dir(self):  # as for a folder the sandbox's user may not enter (a 0700 folder of the grader's)
    if str(self).startswith("/unreadable"):
        raise PermissionError(13, "Permission denied", str(self))
    return looked_into(self)


pathlib.Path.is_dir = is_dir
sys.path.insert(0, "/unreadable/folder")
confine_imports()
print(json.dumps({"kept": "/unreadable/folder" in sys.path, "path": len(sys.path)}))
"""


def test_an_import_path_the_sandbox_cannot_look_into_is_dropped_not_a_crash() -> None:
    # On the H100 (sandbox user `nobody`), a worker forked from the batch's zygote template had the template's 0700
    # folder first on sys.path: the course check raised PermissionError and every import crashed (exit 71).
    report = run_interpreted(UNREADABLE)
    assert report["kept"] is False and report["path"] > 0
