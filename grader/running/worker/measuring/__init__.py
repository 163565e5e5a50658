"""Inside a measuring process (a kernel host timing the submission's kernels, or the reference's worker): a performance
case's requests (`handlers`), planned launches on fresh buffers, poisoned before every timed run and checked after every
sample (`planned_launches`), and the samplers that time them between CUDA events (`samplers`). The grader's side of the
same measurement is grader.running.timing. Imports torch, triton, the protocol and grader.evidence only (a worker
keeps it loaded when it confines imports)."""
