"""The use cases: grade a file (`grade_files`, `grade`, `grading_run`), check one (`check_file`, `interactive`),
a class (`batch/`, `executors`, `batch_helpers`: what a batch starts once for all its grades), the selftest, margins,
bundles. Each takes one request built by the command line (`requests`) and resolves it once: the spec, the seed, the
sandbox (`early_start`), the backend. May import publishing/, running/, judging/ and the model; never cli/."""
