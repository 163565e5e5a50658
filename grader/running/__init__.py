"""Where student code runs, and everything that talks to it. Rooms, each importing only those below it
(pyproject.toml, `[tool.importlinter]`):

- `timing/`: performance cases on CUDA: record, plan, check and time the submission's launches (and `aot.py`, the
  interpreter grade's compile check for the GPU);
- `cases/`: one submission's correctness cases: inputs, guards, requests, observations, probes, fault naming;
- `processes/`: sandboxes, their workers and deadlines, GPU memory and the GPU slot; `profiling/`: Nsight Compute;
- `worker/`: the only place student code runs (its side of the protocol);
- `protocol.py` (every message between the two sides), `guards.py` (guard bands, both sides), `phases.py`.

running/ may import judging/ and the model below it, never operations/ or publishing/.
"""
