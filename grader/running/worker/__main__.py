"""Worker entry point for a fresh process: `python -m grader.running.worker BACKEND SOCKET_FD PROGRESS_FD`.

The grader starts this (instead of forking from the sandbox's zygote) when the worker must run under a
tool such as compute-sanitizer. It answers one request at a time until the grader closes the socket.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    from grader.running.worker.serve import serve

    return serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else -1)


if __name__ == "__main__":
    os._exit(main())
