"""Times kernels: a performance case's target recorded in the student's worker, planned (`performance_plan`), run
and checked in a timer that loaded only its kernels (`kernel_source`, `contestants`), timed in turn with the
reference inside the GPU's exclusive slot, against bars cached per GPU (`calibration`); `performance` runs it all.
May import cases/ (the battery whose worker records), processes/, worker/ (the timing code both sides share),
judging/ and the model."""
