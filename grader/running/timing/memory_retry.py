"""A step of a grade's timing run again while the GPU's memory ran out under it: the recording at the timed size (the
student's worker), the timer's check there, the timed samples. In a class, another process can hold the memory a
moment (a neighbour's hog before the watchdog stops it, within a poll; the driver frees its memory ~0.1 s later), and
a correct kernel must never lose a performance case to it. A submission that asks for more than it may have asks
again and gets the same verdict; a worker stopped for going over its own budget (the watchdog's words name it) is
final at once (`failures.out_of_memory`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import torch

from grader.authoring.spec import PerformanceCase
from grader.judging.performance import errored
from grader.results import PerformanceResult
from grader.running.timing.failures import out_of_memory

logger = logging.getLogger(__name__)

MEMORY_RETRY_WAITS_S = (2.0, 5.0)  # a step short of memory runs again after each of these waits

Step = TypeVar("Step")


def short_of_memory(result: object) -> str:
    """Pure: the out-of-memory line of a case's untimed result ('' for anything else: a step that went on, a result
    timed, another failure, a worker over its own budget)."""
    if isinstance(result, PerformanceResult) and not result.timed:
        return out_of_memory(result.reason)
    return ""


def again_while_short_of_memory(perf: PerformanceCase, doing: str,
                                step: Callable[[], Step]) -> Step | PerformanceResult:
    """`step` (what the grader is `doing` with `perf`: "recording", "checking", "timing"), run again after each of
    MEMORY_RETRY_WAITS_S while its result, or the exception it raised, says the GPU ran out of memory. The last try's
    result is the case's; an exception still short of memory then becomes the case's error, worded as the machine's
    problem (the grader's own allocation failed: nothing of the submission's asked for it). Any other exception goes
    to the caller."""
    tries = (*MEMORY_RETRY_WAITS_S, None)
    for attempt, wait_s in enumerate(tries, start=1):
        result: Step | PerformanceResult
        try:
            result = step()
            short = short_of_memory(result)
        except RuntimeError as exc:  # torch.OutOfMemoryError is one
            short = out_of_memory(str(exc))
            if not short:
                raise
            result = errored(perf, f"the GPU ran out of memory while the grader was {doing} this case ({short}), "
                                   f"{attempt} times: a problem of the machine, not your code")
        if not short or wait_s is None:
            return result
        logger.info("%s: the GPU was out of memory while %s (%s); again in %.0f s", perf.id, doing, short, wait_s)
        torch.cuda.empty_cache()  # what this process's allocator caches goes back (nothing before CUDA starts)
        time.sleep(wait_s)
    raise AssertionError("unreachable")
