"""grader/authoring/course_seed.py: one seed per course, so the same file gets the same grade on every run.

The seed lives in the course's reference/ (staff only), is created once (atomically: a batch's concurrent grades
agree), rotated on request, and chosen by every grade without --seed; a public run uses the assignment's public
seed. End to end: `grader grade` twice on a copy of the course without a seed file creates it once and grades both
runs with it, identically; results.json names it by fingerprint only.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from grader.authoring.course_seed import (
    COURSE,
    GIVEN,
    PUBLIC,
    choose_seed,
    ensure_course_seed,
    fingerprint,
    read_course_seed,
    rotate_course_seed,
    seed_path,
)
from grader.authoring.spec import SpecError, load_assignment, load_public_assignment
from grader.cli import main
from grader.seeds import public_seed
from tests.conftest import copy_course, corpus_mutant, read_results


def test_created_once_then_read_back(tmp_path: Path) -> None:
    assert read_course_seed(tmp_path) is None
    first, created = ensure_course_seed(tmp_path)
    again, created_again = ensure_course_seed(tmp_path)
    assert created and not created_again and first.seed == again.seed and first.seed >= 2**32
    assert seed_path(tmp_path) == tmp_path / "reference" / "course-seed.toml"
    assert seed_path(tmp_path).stat().st_mode & 0o077 == 0  # staff only
    assert first.fingerprint == fingerprint(first.seed) and str(first.seed) not in first.fingerprint


def test_concurrent_grades_agree_on_one_seed(tmp_path: Path) -> None:
    seeds: list[int] = []

    def take() -> None:
        seeds.append(ensure_course_seed(tmp_path)[0].seed)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seeds) == 8 and len(set(seeds)) == 1
    assert [p.name for p in (tmp_path / "reference").iterdir()] == ["course-seed.toml"]  # no temporary left


def test_rotation_replaces_it(tmp_path: Path) -> None:
    old, _ = ensure_course_seed(tmp_path)
    new = rotate_course_seed(tmp_path)
    assert new.seed != old.seed and read_course_seed(tmp_path) == new


def test_a_damaged_seed_file_is_an_error_naming_it(tmp_path: Path) -> None:
    seed_path(tmp_path).parent.mkdir(parents=True)
    seed_path(tmp_path).write_text('seed = "twelve"\n', encoding="utf-8")
    with pytest.raises(SpecError, match="course-seed.toml"):
        read_course_seed(tmp_path)


def test_choose_seed(tmp_path: Path) -> None:
    spec = load_assignment(copy_course("softmax", tmp_path) / "assignment.toml")
    assert choose_seed(spec, 7, public_run=False) == choose_seed(spec, 7, public_run=True)
    assert choose_seed(spec, 7, public_run=False).source == GIVEN
    public = choose_seed(spec, None, public_run=True)
    assert (public.seed, public.source) == (public_seed("softmax"), PUBLIC)
    assert choose_seed(load_public_assignment(spec.spec_path), None, public_run=False).source == PUBLIC
    course = choose_seed(spec, None, public_run=False)
    assert course.source == COURSE and "created the course seed" in course.note
    assert choose_seed(spec, None, public_run=False) == type(course)(course.seed, COURSE, "")


def grade_twice(course: Path, submission: Path, out: Path) -> list[dict]:
    runs = []
    for run in (1, 2):
        code = main(["--assignments", str(course / "assignments"), "grade", str(submission), "--assignment",
                     "fused_layers", "--out", str(out / str(run)), "--backend", "interpreter"])
        assert code == 0
        runs.append({"results": read_results(out / str(run) / "results.json"),
                     "grade": json.loads((out / str(run) / "grade.json").read_text(encoding="utf-8"))})
    return runs


@pytest.mark.slow
def test_grading_twice_without_a_seed_gives_one_grade(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    course = tmp_path / "course"
    copy_course("fused_layers", course)
    seed_file = seed_path(course)
    seed_file.unlink(missing_ok=True)
    _, text = corpus_mutant("gelu_tanh")  # a mutant whose score moved with the seed before cases were decided
    submission = tmp_path / "fused_layers.py"
    submission.write_text(text, encoding="utf-8")
    first, second = grade_twice(course, submission, tmp_path / "out")
    assert "created the course seed" in capsys.readouterr().err
    seed = read_course_seed(course)
    assert seed is not None
    for run in (first, second):
        assert run["grade"]["seed"] == seed.seed and run["grade"]["seed_source"] == COURSE
        extra = run["results"]["extra_data"]
        assert extra["seed"] is None and extra["seed_fingerprint"] == seed.fingerprint  # never the secret itself
        assert str(seed.seed) not in json.dumps(run["results"])
    assert first["results"]["score"] == second["results"]["score"]
    assert ([(t["name"], t["score"], t["tags"]) for t in first["results"]["tests"]]
            == [(t["name"], t["score"], t["tags"]) for t in second["results"]["tests"]])
