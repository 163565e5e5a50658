"""How many CPU threads torch's and numpy's thread pools may use in each process of a grade.

Torch starts as many OpenMP threads per process as the machine has cores, numpy's BLAS as many again, and their
idle threads spin before they sleep. A grade runs several busy processes at once (the grader's, the worker it waits
on, a reference or replay worker), a batch runs many grades: on 16 cores a class of 16 grades had hundreds of such
threads contending for them, each small tensor operation waking a pool. Measured on the 2-core CPU machine
(docs/performance.md, "CPU threads per process"): a class of 40 with 2 workers graded 34 in 90 s with the pools at
their defaults and all 40 in 89 s with one thread per process; one grade alone took 3.1 s against 2.6 s.

The share: the machine's cores over the busy processes of the grades running at once (`BUSY_PROCESSES_PER_GRADE`
per grade), at least one. A caller who set any of the variables (`THREAD_VARIABLES`) keeps them: theirs wins
everywhere, workers included (confinement.PASSED_ENVIRONMENT passes them)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping

# What sizes the thread pools a grade's processes start: torch's OpenMP pool, and numpy's BLAS (OpenBLAS or MKL).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# The processes of one grade that compute at the same time: the grader's (oracles, comparisons) and the worker
# running the case; the others (zygote, replay or reference worker) mostly wait while these two work.
BUSY_PROCESSES_PER_GRADE = 2


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS says, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def threads_per_process(cpus: int, grades: int) -> int:
    """Pure: each busy process's share of `cpus` when `grades` grades run at once; at least one."""
    return max(1, cpus // (BUSY_PROCESSES_PER_GRADE * max(1, grades)))


def thread_environment(grades: int, environ: Mapping[str, str] | None = None, cpus: int | None = None
                       ) -> dict[str, str]:
    """The variables to add for `grades` grades at once: none where `environ` (default: this process's) already
    sets one of them, since the caller's choice wins."""
    environ = os.environ if environ is None else environ
    if any(name in environ for name in THREAD_VARIABLES):
        return {}
    threads = str(threads_per_process(usable_cpus() if cpus is None else cpus, grades))
    return {name: threads for name in THREAD_VARIABLES}


def threads_told(environ: Mapping[str, str] | None = None) -> int | None:
    """The OpenMP thread count `environ` (default: this process's) sets, None where it sets none it can use."""
    text = (os.environ if environ is None else environ).get("OMP_NUM_THREADS", "")
    return int(text) if text.isdigit() and int(text) > 0 else None


@contextlib.contextmanager
def exported(grades: int) -> Iterator[dict[str, str]]:
    """This process's environment carries the share for `grades` grades while the block runs (what every process
    it starts meanwhile inherits: a batch's children and the helpers they fork from), then what it had before."""
    added = thread_environment(grades)
    os.environ.update(added)
    try:
        yield added
    finally:
        for name in added:
            os.environ.pop(name, None)


def share_for_this_process(grades: int = 1) -> int | None:
    """This process and every one it starts from now on: the share for `grades` grades where its environment sets
    none (a batch's child has the batch's already). torch reads the variables when it is imported; where it is
    imported already (a child forked from a template that imported it), its pool is set here. Returns the count."""
    os.environ.update(thread_environment(grades))
    threads = threads_told()
    torch = sys.modules.get("torch")
    if threads is not None and torch is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads
