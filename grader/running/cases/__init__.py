"""The case battery: one submission's correctness cases, run in its workers and observed.

`battery.Battery` runs a case: inputs from the seed, guarded buffers (`arguments`, `placement`, and
grader.running.guards), the request (`requests`), the worker's reply turned into an `Observation` (`observe`),
then the probes and the replay that check what a passing or failing run really did (`probes`) and, on a GPU,
what names a memory fault (`fault_recovery`, `sanitizer`, `cpu_companion`). `workers` keeps the submission's
workers. May import grader.running.processes, grader.running.protocol and guards, judging and the model below.
"""
