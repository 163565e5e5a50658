"""Times kernels, the grader's side: a performance case's target recorded in the student's worker, its launches planned
(`launch_plan`), run and checked in a timer that built only the submission's kernels, from data (a kernel host:
`contestants`), timed in turn with the reference inside the GPU's exclusive slot, against bars cached per GPU
(`calibration`), profiled once (`profiled_replay`); `runner` runs it all. What the measuring processes themselves run
is grader.running.worker.measuring.
May import cases/ (the battery whose worker records), processes/, worker/ (the timing code both sides share),
judging/ and the model."""
