"""A GitHub Classroom autograding workflow for an assignment (`grader classroom-workflow`).

GitHub Classroom grades a student repository with the workflow `.github/workflows/classroom.yml`: each
test is a step of `classroom-resources/autograding-command-grader@v1` (inputs `test-name`, `setup-command`,
`command`, `timeout` in minutes, `max-score`: the points, awarded when the command exits 0), and a final
`classroom-resources/autograding-grading-reporter@v1` step reports them: its `runners` input lists the
step ids, and each runner's output reaches it as the environment variable `<STEP-ID>_RESULTS`
(https://github.com/classroom-resources/autograding-command-grader,
https://github.com/classroom-resources/autograding-grading-reporter, GitHub Docs "Use autograding").

Here there is one step per target with public cases, worth the target's points, running
`grader check SUBMISSION --target T`, which exits 0 exactly when every public case of T passes, on
Triton's CPU interpreter (GitHub's runners have no GPU). Hidden cases never reach a student repository:
grade them with `grader grade`/`batch` for the real mark. The workflow checks out the course's copy of the
grader (`grader_repo`, a repository the student's workflow can read) into `.grader` and installs it
with a CPU torch.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from grader.authoring.spec import Assignment

COMMAND_GRADER = "classroom-resources/autograding-command-grader@v1"
REPORTER = "classroom-resources/autograding-grading-reporter@v1"
DEFAULT_GRADER_REPO = "your-org/kernel-grader"
GRADER_FOLDER = ".grader"


@dataclass(frozen=True)
class ClassroomStep:
    step_id: str
    target: str
    points: float
    command: str


def step_id(target: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", target.lower())


def classroom_steps(assignment: Assignment, submission: str | None = None) -> list[ClassroomStep]:
    """One step per target that has public cases on the interpreter, worth all of that target's points."""
    submission = submission or assignment.submission_file
    public: dict[str, float] = {}
    points: dict[str, float] = {}
    for case in assignment.cases_for("interpreter"):
        points[case.target] = points.get(case.target, 0.0) + case.points
        if case.is_public:
            public[case.target] = public.get(case.target, 0.0) + case.points
    steps = []
    for target in assignment.targets:
        if target not in public:
            continue
        command = (f"grader --assignments {GRADER_FOLDER}/assignments check {submission} "
                   f"--assignment {assignment.id} --target {target} --backend interpreter")
        steps.append(ClassroomStep(step_id(target), target, points[target], command))
    return steps


def _q(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid YAML double-quoted scalar


def classroom_workflow(assignment: Assignment, grader_repo: str = DEFAULT_GRADER_REPO,
                       submission: str | None = None, timeout_minutes: int = 10,
                       torch_version: str = "2.13.0") -> str:
    """The workflow's YAML text (pure)."""
    steps = classroom_steps(assignment, submission)
    lines = [
        f"# GitHub Classroom autograding for {assignment.id}, written by `grader classroom-workflow`.",
        "# Public cases only, on Triton's CPU interpreter; grade hidden cases with `grader grade` / `grader batch`.",
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
        "      - name: Checkout the grader",
        "        uses: actions/checkout@v4",
        "        with:",
        f"          repository: {_q(grader_repo)}  # the course's copy of kernel-grader",
        f"          path: {GRADER_FOLDER}",
        "      - uses: actions/setup-python@v5",
        "        with:",
        "          python-version: \"3.12\"",
        "      - name: Install the grader (CPU torch)",
        f"        run: pip install torch=={torch_version} --index-url https://download.pytorch.org/whl/cpu "
        f"&& pip install -e {GRADER_FOLDER}",
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
