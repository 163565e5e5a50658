"""Grade a whole class: `grader batch SUBMISSIONS --assignment ID --out DIR`.

SUBMISSIONS is a folder of `.py` or `.ipynb` files (file stem = student id), a folder of folders (folder
name = student id; the file is the assignment's `submission_file`, else its notebook `<stem>.ipynb`, else
the folder's only `.py`, else its only notebook), a `.zip`
of either, or Gradescope's "export submissions" layout (folders plus `submission_metadata.yml`,
which adds the submitters' names, emails and student ids).

DIR holds one folder per student (results.json, grade.json, reports, batch-record.json), then
gradebook.json, gradebook.csv, canvas.csv (Canvas's gradebook import) and class_report.html, rebuilt
from those folders after every run.

Crash safety: a student's outputs are written into scratch space and the whole folder is renamed
into place, so `DIR/<student>/results.json` exists exactly when that student's grade is complete.
A run skips every student whose result is current (same seed, backend and grading generation, same
submission bytes) unless `--force`; killed at any moment (Ctrl-C, SIGTERM, SIGKILL) and re-run, it
loses nothing and grades nothing twice. Ctrl-C and SIGTERM also leave a gradebook that matches DIR
(see `run_batch`). `DIR/batch.json` records the seed, backend and generation, and what canvas.csv
depends on (Canvas column, roster, missing score: kept for every rerun);
`DIR/batch-log.jsonl` records every run's events (start, graded, failed) for audit.

The package, one module per job: `submissions` (finding them, unzipping, ids), `gradescope_metadata` (its
submission_metadata.yml, with PyYAML), `folder` (DIR's file names, its lock, the error), `manifest`
(batch.json and each result's state), `commits` (a student's folder put in place whole), `event_log`
(batch-log.jsonl), `progress` (what it prints), `signals` (Ctrl-C and SIGTERM), `gradebook` (the class's
files) and `run` (one run, tying them together). What this module exports is the public API.
"""

from grader.operations.batch.commits import commit
from grader.operations.batch.folder import BATCH_FORMAT_VERSION, EVENT_LOG, MANIFEST, RECORD, BatchError
from grader.operations.batch.gradebook import build_gradebook
from grader.operations.batch.gradescope_metadata import GRADESCOPE_METADATA, read_gradescope_metadata
from grader.operations.batch.manifest import Manifest, result_state, settle_manifest
from grader.operations.batch.run import (
    BatchOptions,
    BatchSummary,
    default_grade_timeout,
    format_summary,
    make_executor,
    run_batch,
)
from grader.operations.batch.signals import INTERRUPT_AT, Interrupts, catching_interrupts, interrupt_signal
from grader.operations.batch.submissions import Submission, discover_submissions, find_submission_file

__all__ = [
    "BATCH_FORMAT_VERSION", "EVENT_LOG", "GRADESCOPE_METADATA", "INTERRUPT_AT", "MANIFEST", "RECORD",
    "BatchError", "BatchOptions", "BatchSummary", "Interrupts", "Manifest", "Submission", "build_gradebook",
    "catching_interrupts", "commit", "default_grade_timeout", "discover_submissions", "find_submission_file",
    "format_summary", "interrupt_signal", "make_executor", "read_gradescope_metadata", "result_state",
    "run_batch", "settle_manifest",
]
