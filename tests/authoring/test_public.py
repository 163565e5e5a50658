"""The public form of a spec (grader/authoring/public.py), computed in one place: what it keeps and drops,
that it loads without torch (setup.py's isolated build has none), and that `grader check` grades with it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grader.authoring.discovery import find_assignment
from grader.authoring.public import dump_toml, hidden_case_ids, public_spec, public_toml
from grader.authoring.spec import load_assignment, load_public_assignment
from grader.operations.interactive import resolve_assignment

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENTS = ("attention", "fused_layers", "softmax")


def spec_path(assignment_id: str) -> Path:
    return ROOT / "assignments" / assignment_id / "assignment.toml"


def test_public_spec_keeps_the_public_cases_and_drops_any_reference() -> None:
    raw = {
        "assignment": {"id": "a", "reference": "reference.py", "title": "t"},
        "cases": [{"id": "p", "visibility": "public"}, {"id": "h", "visibility": "hidden"}],
        "traps": {"x": {"title": "X"}},
        "performance": [{"id": "perf"}],
    }
    public = public_spec(raw)
    assert public == {"assignment": {"id": "a", "title": "t"}, "cases": [{"id": "p", "visibility": "public"}],
                      "traps": {"x": {"title": "X"}}, "performance": [{"id": "perf"}]}
    assert raw["cases"][1]["id"] == "h" and raw["assignment"]["reference"] == "reference.py"  # pure
    assert hidden_case_ids(raw) == ["h"] and hidden_case_ids(public) == []


@pytest.mark.parametrize("assignment_id", ASSIGNMENTS)
def test_public_toml_reads_back_with_no_hidden_case(assignment_id: str) -> None:
    text = spec_path(assignment_id).read_text(encoding="utf-8")
    raw = tomllib.loads(text)
    written = public_toml(text)
    assert tomllib.loads(written) == public_spec(raw) == tomllib.loads(dump_toml(public_spec(raw)))
    hidden = hidden_case_ids(raw)
    assert len(hidden) >= 10 and not [h for h in hidden if f'"{h}"' in written]
    assert "#" not in written.split("\n", 1)[1]  # comments of the source (which may name cases) are gone


@pytest.mark.parametrize("assignment_id", ASSIGNMENTS)
def test_load_public_assignment_is_the_public_part_of_the_full_one(assignment_id: str) -> None:
    full = load_assignment(spec_path(assignment_id))
    public = load_public_assignment(spec_path(assignment_id))
    assert public.public and not full.public
    assert [c for c in public.cases] == [c for c in full.cases if c.is_public]
    assert public.reference_dir is None and public.reference_solution is None
    assert full.reference_solution is not None and public.template_dir == full.template_dir
    assert (public.kernels, public.functions, public.traps, public.tolerances, public.performance) == (
        full.kernels, full.functions, full.traps, full.tolerances, full.performance)


def test_check_resolves_the_public_form(tmp_path: Path) -> None:
    submission = tmp_path / "softmax.py"
    submission.write_text("", encoding="utf-8")
    by_name = resolve_assignment(None, submission, ROOT / "assignments")
    by_id = resolve_assignment("softmax", submission, ROOT / "assignments")
    for assignment in (by_name, by_id):
        assert assignment.public and assignment.id == "softmax"
        assert all(c.is_public for c in assignment.cases)
    assert not find_assignment("softmax", ROOT / "assignments").public  # grade, selftest: the full spec


def test_public_form_loads_without_torch_or_the_grader() -> None:
    """What setup.py does inside setuptools' isolated build environment: load the module by file path."""
    code = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('public_form', {str(ROOT / 'grader/authoring/public.py')!r})\n"
        "module = importlib.util.module_from_spec(spec); sys.modules['public_form'] = module\n"
        "spec.loader.exec_module(module)\n"
        f"text = open({str(spec_path('softmax'))!r}, encoding='utf-8').read()\n"
        "out = module.public_toml(text)\n"
        "print(json.dumps([sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'grader', 'numpy')),"
        " out.count('[[cases]]')]))\n"
    )
    ran = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=False, timeout=60)
    assert ran.returncode == 0, ran.stderr
    heavy, cases = json.loads(ran.stdout)
    assert heavy == [] and cases == 4
