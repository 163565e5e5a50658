"""grader/running/cases/failures.py: a request that did not come back, in the student's words: a timeout says
what did not finish, a crash what crashed the worker; a replay that failed is named for what happened (the
student's kernel faulting, raising, running out of bounds), `tampering` only for a record that was altered."""

from __future__ import annotations

import dataclasses

from grader import trap_ids
from grader.evidence.worker_error import WorkerError
from grader.judging.false_hints import HintCall
from grader.running import protocol
from grader.running.cases.failures import (
    failed_request,
    failure_sentence,
    import_failure_sentence,
    replay_failure,
    tail,
)
from grader.running.processes.client import ImportFailure, WorkerFailure

TORCH_FAULT = ("CUDA error: an illegal memory access was encountered\n"
               "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n")
HINTS = HintCall(12, "multiple_of", "offs = tl.multiple_of(offs, 16)")


def replayed(error: WorkerError, stage: str = "kernel") -> protocol.Replayed:
    return protocol.failed(protocol.Replayed, error, stage=stage)


def test_failure_sentence_says_plainly_what_did_not_finish() -> None:
    timeout = WorkerFailure(trap_ids.TIMEOUT, "did not finish within 15 s (layernorm(...))")
    assert failure_sentence("layernorm(...)", timeout) == ("Did not finish within 15 s (layernorm(...)): the grader "
                                                           "stopped it.")
    on_gpu = WorkerFailure(trap_ids.TIMEOUT, "did not finish: nothing happened for 3 s after its last kernel launch")
    assert failure_sentence("softmax(...)", on_gpu) == ("Did not finish: nothing happened for 3 s after its last "
                                                        "kernel launch (softmax(...)): the grader stopped it.")
    crash = WorkerFailure(trap_ids.CRASH, "the worker died while softmax(...) (killed by SIGSEGV)")
    assert failure_sentence("softmax(...)", crash) == ("softmax(...) crashed the worker: the worker died while "
                                                       "softmax(...) (killed by SIGSEGV).")


def test_an_import_that_timed_out_names_module_level_code_and_the_file_once() -> None:
    hung = ImportFailure(trap_ids.TIMEOUT, "did not finish within 60 s (importing loop.py)", limit_s=60.0)
    sentence = import_failure_sentence("loop.py", hung)
    assert sentence.startswith("Importing loop.py did not finish within 60 s: code at module level (outside any "
                               "function) runs when the file is imported")
    assert "`while True:`" in sentence and sentence.endswith("no case could run.")
    assert sentence.count("loop.py") == 1 and "timed out" not in sentence
    crashed = ImportFailure(trap_ids.CRASH, "the worker died while importing loop.py (exit code 3)")
    assert import_failure_sentence("loop.py", crashed) == "Importing loop.py crashed: the worker died (exit code 3)."
    # a worker that never came up (not the file's import) keeps its own words
    never_up = WorkerFailure(trap_ids.TIMEOUT, "did not finish within 120 s (starting the worker (importing torch "
                                               "and triton))")
    assert import_failure_sentence("loop.py", never_up) == ("Importing loop.py timed out: did not finish within 120 s "
                                                            "(starting the worker (importing torch and triton)).")


def test_a_failed_request_keeps_the_submissions_last_output() -> None:
    crash = WorkerFailure(trap_ids.CRASH, "the worker died (signal SIGSEGV)", output_tail="  printed last\n")
    observed = failed_request("softmax(...)", crash, (), "softmax.py")
    assert observed.trap == trap_ids.CRASH
    assert observed.message.endswith("Last output of the submission:\nprinted last")
    assert tail("   \n") == ""


def test_a_gpu_fault_that_a_false_promise_explains_is_a_false_hint() -> None:
    crash = WorkerFailure(trap_ids.CRASH, "the worker died", output_tail="CUDA error: misaligned address")
    assert failed_request("softmax(...)", crash, (HINTS,), "softmax.py").trap == trap_ids.FALSE_HINT
    assert failed_request("softmax(...)", crash, (), "softmax.py").trap == trap_ids.CRASH


def test_a_failed_replay_is_named_for_what_happened() -> None:
    assert replay_failure("softmax", failure=WorkerFailure("crash", "the worker died (signal SIGABRT)")).trap == "crash"
    assert replay_failure("softmax", failure=WorkerFailure("timeout", "no answer after 15 s")).trap == "timeout"
    stray = WorkerError(type="InterpreterError", chain=("triton.runtime.errors.InterpreterError",
                                                        "grader.running.worker.fence.StrayWrite"))
    assert replay_failure("softmax", reply=replayed(stray)).trap == "oob-write"
    raised = WorkerError(type="InterpreterError", message="boom", chain=("triton.runtime.errors.InterpreterError",))
    assert replay_failure("softmax", reply=replayed(raised)).trap == "runtime-error"
    decoding = WorkerError(type="ValueError", message="a tensor view reaching past the end of its storage")
    found = replay_failure("softmax", reply=replayed(decoding, stage="record"))
    assert found.trap == "tampering" and "could not be decoded" in found.message
    assert replay_failure("softmax", reply=protocol.Replayed(ok=True)).trap == "tampering"  # an ok reply is no failure
    assert replay_failure("softmax", reply=protocol.Replayed(ok=False)).trap == "tampering"  # failed, saying nothing


def test_a_replay_that_faults_is_a_memory_fault_not_a_runtime_error() -> None:
    error = WorkerError(type="AcceleratorError", chain=("torch.AcceleratorError",), message=TORCH_FAULT,
                        root_type="AcceleratorError", root_message=TORCH_FAULT)
    found = replay_failure("softmax", reply=replayed(error))
    assert found.trap == trap_ids.MEMORY_FAULT and "illegal memory access" in found.message
    assert "CUDA_LAUNCH_BLOCKING" not in found.message
    misaligned = dataclasses.replace(error, message="CUDA error: misaligned address",
                                     root_message="CUDA error: misaligned address")
    assert replay_failure("softmax", reply=replayed(misaligned), calls=(HINTS,)).trap == trap_ids.FALSE_HINT
