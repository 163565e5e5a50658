"""The processes a local batch starts once for all its grades, so that no grade pays for them.

- The child template (grader.operations.child_template): every grade's child is forked from a process that
  imported the grader, torch and triton (no CUDA, no assignment or student data), instead of importing them afresh.
- On CUDA, the shared zygote (grader.running.processes.shared_zygote): every grade's reference-solution worker is
  forked from one process that imported torch and triton, instead of each grade starting a fresh one.
- Where sandboxes are isolated (root, namespaces), the zygote template (the same module): every grade's sandbox zygote
  is forked from one process that imported the zygote's preload, and confined there, instead of importing it afresh;
  in an interpreter batch a second one, of Triton without the interpreter, for each grade's GPU compile check.

Both only where the batch has more than one grade and runs on Linux; each can be turned off ("0" in its variable),
and each grade falls back to starting afresh where one cannot start or is gone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from grader.operations.child_template import Template
from grader.running.processes.confinement import namespaces_available, namespaces_wanted
from grader.running.processes.shared_zygote import TEMPLATE_ADDRESS_VARIABLE, SharedZygote, ZygoteTemplate

TEMPLATE_VARIABLE = "GRADER_CHILD_TEMPLATE"  # "0": every child of a batch starts afresh (no template)
SHARED_ZYGOTE_VARIABLE = "GRADER_REFERENCE_ZYGOTE"  # "0": every grade's reference worker starts afresh
SANDBOX_TEMPLATE_VARIABLE = "GRADER_SANDBOX_TEMPLATE"  # "0": every grade's sandbox zygote starts afresh


@dataclass
class BatchHelpers:
    template: Template | None = None
    shared_zygote: SharedZygote | None = None
    zygote_template: ZygoteTemplate | None = None
    aot_template: ZygoteTemplate | None = None  # an interpreter batch's: the GPU compile check's zygotes (aot.py)

    def environment(self) -> dict[str, str]:
        """What every child of the batch is told (where the shared zygote and the zygote templates listen)."""
        told: dict[str, str] = dict(self.shared_zygote.environment()) if self.shared_zygote is not None else {}
        templates = [t.environment()[TEMPLATE_ADDRESS_VARIABLE] for t in (self.zygote_template, self.aot_template)
                     if t is not None]
        if templates:
            told[TEMPLATE_ADDRESS_VARIABLE] = ",".join(templates)
        return told

    def close(self) -> None:
        if self.template is not None:
            self.template.close()
            self.template = None
        if self.shared_zygote is not None:
            self.shared_zygote.close()
            self.shared_zygote = None
        for template in (self.zygote_template, self.aot_template):
            if template is not None:
                template.close()
        self.zygote_template = self.aot_template = None


def start_helpers(grades: int, backends: Sequence[str], template_environment: dict[str, str]) -> BatchHelpers:
    """The helpers worth starting for `grades` grades on `backends` (each job's); none for one grade or off Linux
    (macOS forbids much after a fork of a process that loaded its frameworks)."""
    helpers = BatchHelpers()
    if grades < 2 or not sys.platform.startswith("linux"):
        return helpers
    if os.environ.get(TEMPLATE_VARIABLE, "") != "0":
        try:
            helpers.template = Template(template_environment)
        except OSError:
            pass
    if "cuda" in backends and os.environ.get(SHARED_ZYGOTE_VARIABLE, "") != "0":
        try:
            helpers.shared_zygote = SharedZygote("cuda")
        except OSError:
            pass
    kinds = set(backends)
    if (len(kinds) == 1 and kinds <= {"cuda", "interpreter"} and namespaces_available() and namespaces_wanted()
            and os.environ.get(SANDBOX_TEMPLATE_VARIABLE, "") != "0"):
        backend = kinds.pop()
        try:
            helpers.zygote_template = ZygoteTemplate(backend)
            if backend == "interpreter":  # each grade's GPU compile check imports Triton without the interpreter
                helpers.aot_template = ZygoteTemplate("aot")
        except OSError:
            pass
    return helpers
