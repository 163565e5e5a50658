"""The evidence: what the grader observed of a submission, as plain frozen values.

Judging reads these and nothing else of a run (no process, socket or file); running builds them. This
package sits below judging in the layers (pyproject.toml, `[tool.importlinter]`): it may import torch,
the standard library and the model's leaves (`grader.trap_ids`), nothing else of the grader.
"""
