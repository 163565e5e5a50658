"""A GitHub Classroom autograding workflow for an assignment (`grader classroom-workflow`).

GitHub Classroom grades a student repository with the workflow `.github/workflows/classroom.yml`: each
test is a step of `classroom-resources/autograding-command-grader@v1` (inputs `test-name`, `setup-command`,
`command`, `timeout` in minutes, `max-score`: the points, awarded when the command exits 0), and a final
`classroom-resources/autograding-grading-reporter@v1` step reports them: its `runners` input lists the
step ids, and each runner's output reaches it as the environment variable `<STEP-ID>_RESULTS`
(https://github.com/classroom-resources/autograding-command-grader,
https://github.com/classroom-resources/autograding-grading-reporter, GitHub Docs "Use autograding").

Here there is one step per target with public cases, worth the points of the cases it runs (the public
cases of that target: the Classroom score covers public cases only), running
`grader check SUBMISSION --target T`, which exits 0 exactly when every public case of T passes, on
Triton's CPU interpreter (GitHub's runners have no GPU). Hidden cases never reach a student repository:
grade them with `grader grade`/`batch` (or Gradescope) for the real mark.

A student can read everything their workflow can (they can edit it), so it touches nothing secret: the
public assignment comes from the template repository itself (`assignments/<id>/`, the public form the
student bundle holds), and the grader is installed from `grader_repo` as a package (`pip install
git+https://...`: the wheel ships public forms only). That repository must hold no course secrets: no
reference/, no hidden cases of the course's assignments.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from grader.authoring.spec import Assignment

COMMAND_GRADER = "classroom-resources/autograding-command-grader@v1"
REPORTER = "classroom-resources/autograding-grading-reporter@v1"
PUBLIC_ASSIGNMENTS = "assignments"  # the template repository's folder holding the public form


@dataclass(frozen=True)
class ClassroomStep:
    step_id: str
    target: str
    points: float
    command: str


def step_id(target: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", target.lower())


def classroom_steps(assignment: Assignment, submission: str | None = None) -> list[ClassroomStep]:
    """One step per target that has public cases on the interpreter, worth the points of those cases: the
    cases its command runs (`grader check --target T` runs the public ones)."""
    submission = submission or assignment.submission_file
    public: dict[str, float] = {}
    for case in assignment.cases_for("interpreter", public_only=True):
        public[case.target] = public.get(case.target, 0.0) + case.points
    steps = []
    for target in assignment.targets:
        if target not in public:
            continue
        command = (f"grader --assignments {PUBLIC_ASSIGNMENTS} check {submission} "
                   f"--assignment {assignment.id} --target {target} --backend interpreter")
        steps.append(ClassroomStep(step_id(target), target, public[target], command))
    return steps


def package_source(grader_repo: str) -> str:
    """What pip installs the grader from: the repository as a package (a wheel: public forms only), never a
    checkout left on the runner."""
    return f"kernel-grader @ git+https://github.com/{grader_repo}"


def _q(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid YAML double-quoted scalar


def classroom_workflow(assignment: Assignment, grader_repo: str,
                       submission: str | None = None, timeout_minutes: int = 10,
                       torch_version: str = "2.13.0") -> str:
    """The workflow's YAML text (pure)."""
    steps = classroom_steps(assignment, submission)
    lines = [
        f"# GitHub Classroom autograding for {assignment.id}, written by `grader classroom-workflow`.",
        "# Public cases only, on Triton's CPU interpreter: the Classroom score is the public cases' points. Grade",
        "# the hidden cases with `grader grade` / `grader batch` (or Gradescope). The public assignment is this",
        f"# repository's {PUBLIC_ASSIGNMENTS}/{assignment.id}/ (from `grader student-bundle`); the grader is "
        "installed as a package.",
        "name: Autograding Tests",
        "\"on\":",
        "  - push",
        "  - repository_dispatch",
        "permissions:",
        "  checks: write",
        "  actions: read",
        "  contents: read",
        "jobs:",
        "  run-autograding-tests:",
        "    runs-on: ubuntu-latest",
        "    if: github.actor != 'github-classroom[bot]'",
        "    steps:",
        "      - name: Checkout code",
        "        uses: actions/checkout@v4",
        "      - uses: actions/setup-python@v5",
        "        with:",
        "          python-version: \"3.12\"",
        "      - name: Install the grader (CPU torch)",
        f"        run: pip install torch=={torch_version} --index-url https://download.pytorch.org/whl/cpu "
        f"&& pip install {_q(package_source(grader_repo))}",
    ]
    for step in steps:
        lines += [
            f"      - name: {_q(step.target)}",
            f"        id: {step.step_id}",
            f"        uses: {COMMAND_GRADER}",
            "        with:",
            f"          test-name: {_q(step.target)}",
            "          setup-command: \"\"",
            f"          command: {_q(step.command)}",
            f"          timeout: {timeout_minutes}",
            f"          max-score: {step.points:g}",
        ]
    lines += [
        "      - name: Autograding Reporter",
        f"        uses: {REPORTER}",
        "        env:",
        *[f"          {step.step_id.upper()}_RESULTS: \"${{{{steps.{step.step_id}.outputs.result}}}}\""
          for step in steps],
        "        with:",
        f"          runners: {','.join(step.step_id for step in steps)}",
    ]
    return "\n".join(lines) + "\n"
