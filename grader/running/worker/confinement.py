"""Inside the worker, before student code runs: the grader's and the course's packages leave sys.modules and
cannot be imported again, the course folders leave sys.path, and (best effort) no new sockets."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

GUARDED_PACKAGES = ("grader", "reference", "assignments", "tests")


class _ImportGuard:
    """Refuses imports of the grader's own packages from submission code (a submission that imports
    the grader or the reference could read oracles and answers instead of computing them)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] in GUARDED_PACKAGES:
            raise ImportError(f"importing {name!r} is not allowed in a submission")
        return None


def _deny_network() -> None:
    """Best effort where the worker is not in its own network namespace: no new sockets."""
    import socket

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError("network access is not allowed in a submission")

    socket.socket = refuse  # type: ignore[assignment,misc]
    socket.create_connection = refuse  # type: ignore[assignment]


# The grader's modules a worker keeps loaded (its own code, and the plain values and messages it shares with the
# grader): everything else of the grader, and the course's packages, leave sys.modules before student code runs.
WORKER_MODULES = ("grader.running.worker", "grader.evidence")
WORKER_SINGLE_MODULES = ("grader", "grader.running", "grader.running.guards", "grader.running.protocol",
                         "grader.trap_ids")


def confine_imports() -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in GUARDED_PACKAGES and not name.startswith(WORKER_MODULES) \
                and name not in WORKER_SINGLE_MODULES:
            del sys.modules[name]
    sys.meta_path.insert(0, _ImportGuard())  # type: ignore[arg-type]
    sys.path[:] = [p for p in sys.path if p and not _holds_the_course(p)]
    _deny_network()


def _holds_the_course(entry: str) -> bool:
    """Whether an import path entry is the course's checkout (its `assignments/` folder), or cannot be looked into
    by the sandbox's user (then nothing could be imported from it either: it goes too)."""
    try:
        return (Path(entry) / "assignments").is_dir()
    except OSError:
        return True
