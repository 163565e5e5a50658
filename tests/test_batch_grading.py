"""`grader batch` end to end on four real submissions (the reference and three fast mutants, copied
into tmp_path): 1 and 2 workers give the same gradebook; a re-run grades nothing; interrupting the
batch (SIGINT, SIGKILL of the parent) and re-running grades every submission exactly once; a local
Ray instance gives the same gradebook; the class report opens in headless chromium.

Each batch grades for ~30 s on a 2-core machine, so the one-worker batch is graded once per module
and the other runs are compared with it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import corpus_mutant

from grader.cli import main
from grader.gradebook import RUN_DETAIL_FIELDS

pytestmark = pytest.mark.slow

SEED = "3"
CORPUS = {  # student -> id in the fused_layers corpus (fast to grade: ~7 s each)
    "alice": "reference",
    "bob": "syntax_error",
    "carol": "crash_at_import",
    "dave": "missing_symbol",
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, repo_root: Path) -> Path:
    folder = tmp_path_factory.mktemp("class") / "submissions"
    folder.mkdir()
    for student, mutant_id in CORPUS.items():
        (folder / f"{student}.py").write_text(corpus_mutant(mutant_id)[1], encoding="utf-8")
    return folder


def batch_argv(repo_root: Path, submissions: Path, out: Path, *extra: str) -> list[str]:
    return ["--assignments", str(repo_root / "assignments"), "batch", str(submissions), "--assignment",
            "fused_layers", "--out", str(out), "--seed", SEED, "--backend", "interpreter", *extra]


def run_batch(repo_root: Path, submissions: Path, out: Path, *extra: str) -> tuple[int, str]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(batch_argv(repo_root, submissions, out, *extra))
    return code, printed.getvalue()


def gradebook(out: Path) -> dict[str, Any]:
    return json.loads((out / "gradebook.json").read_text(encoding="utf-8"))


def comparable(book: dict[str, Any]) -> dict[str, Any]:
    """The gradebook without what describes the run (when, how long, which GPU)."""
    rows = [{k: v for k, v in row.items() if k not in RUN_DETAIL_FIELDS} for row in book["rows"]]
    return {**{k: v for k, v in book.items() if k != "generated_at"}, "rows": rows}


def events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "batch-log.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory: pytest.TempPathFactory, repo_root: Path, corpus: Path) -> Path:
    out = tmp_path_factory.mktemp("one-worker") / "out"
    code, printed = run_batch(repo_root, corpus, out, "--workers", "1")
    assert code == 0, printed
    return out


def test_one_worker_grades_every_submission_right(one_worker: Path, repo_root: Path) -> None:
    book = gradebook(one_worker)
    assert book["summary"]["graded"] == book["summary"]["students"] == 4
    rows = {row["student"]: row for row in book["rows"]}
    assert list(rows) == sorted(CORPUS)
    for student, mutant_id in CORPUS.items():
        expected = corpus_mutant(mutant_id)[0].expected("interpreter")
        assert tuple(rows[student]["traps"]) == expected, student
        assert rows[student]["seed"] == int(SEED) and rows[student]["status"] == "graded"
        assert (one_worker / student / "results.json").is_file()
        assert (one_worker / student / "report.html").is_file()
    assert rows["alice"]["score"] == rows["alice"]["max_score"] == book["max_score"] == 40
    assert rows["bob"]["score"] == rows["carol"]["score"] == 0
    assert 0 < rows["dave"]["score"] < 40
    header = (one_worker / "gradebook.csv").read_text(encoding="utf-8").splitlines()[0]
    assert header.startswith("student,name,email,sid,status,score,max_score,fused_linear_gelu_kernel,")
    assert not (one_worker / ".scratch").exists()


def test_rerun_grades_nothing(one_worker: Path, repo_root: Path, corpus: Path) -> None:
    before = {s: (one_worker / s / "results.json").stat().st_mtime_ns for s in CORPUS}
    code, printed = run_batch(repo_root, corpus, one_worker)
    assert code == 0
    assert "nothing to grade: 4 of 4 already graded" in printed
    assert {s: (one_worker / s / "results.json").stat().st_mtime_ns for s in CORPUS} == before


def test_two_workers_on_a_zip_give_the_same_gradebook(one_worker: Path, repo_root: Path, corpus: Path,
                                                      tmp_path: Path) -> None:
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as zf:  # the folder-of-folders layout, inside a wrapping folder
        for student in CORPUS:
            zf.write(corpus / f"{student}.py", f"export/{student}/fused_layers.py")
    code, printed = run_batch(repo_root, archive, tmp_path / "out", "--workers", "2")
    assert code == 0, printed
    assert "with local, 2 workers" in printed
    assert comparable(gradebook(tmp_path / "out")) == comparable(gradebook(one_worker))


def test_ray_executor_gives_the_same_gradebook(one_worker: Path, repo_root: Path, corpus: Path,
                                               tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'kernel-grader[ray]')")
    code, printed = run_batch(repo_root, corpus, tmp_path / "out", "--executor", "ray", "--workers", "2")
    assert code == 0, printed
    assert "with ray on a local Ray instance" in printed
    assert comparable(gradebook(tmp_path / "out")) == comparable(gradebook(one_worker))


# ------------------------------------------------------------------------------------------- interrupted


def processes_with(marker: str) -> list[int]:
    """Live processes whose environment carries `marker` (the batch's children inherit it)."""
    found = []
    needle = marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if needle in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_interrupted_batch_resumes_and_grades_each_submission_once(
        sig: signal.Signals, one_worker: Path, repo_root: Path, corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    marker = f"GRADER_KILL_TEST={uuid.uuid4().hex}"
    env = {**os.environ, marker.split("=")[0]: marker.split("=")[1]}
    command = [sys.executable, "-m", "grader", *batch_argv(repo_root, corpus, out, "--workers", "2")]
    batch = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 240
        while not (out / "batch-log.jsonl").is_file() or not any(e["event"] == "graded" for e in events(out)):
            assert batch.poll() is None and time.monotonic() < deadline, "the batch ended before a grade"
            time.sleep(0.05)
        batch.send_signal(sig)
        printed, _ = batch.communicate(timeout=60)
    finally:
        if batch.poll() is None:
            batch.kill()
            batch.wait()
    if sig == signal.SIGINT:
        assert batch.returncode == 130, printed
        assert "interrupted: " in printed and "re-run the same command to finish" in printed
        assert gradebook(out)["summary"]["pending"] > 0  # written on the way out
    else:
        assert batch.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 20
    while processes_with(marker) and time.monotonic() < deadline:  # children die with the batch
        time.sleep(0.1)
    assert processes_with(marker) == []

    done_before = {s for s in CORPUS if (out / s / "results.json").is_file()}
    assert done_before and done_before != set(CORPUS)  # interrupted midway
    stamps = {s: (out / s / "results.json").stat().st_mtime_ns for s in done_before}
    first_run = {e["run"] for e in events(out)}

    code, rerun = run_batch(repo_root, corpus, out)
    assert code == 0, rerun
    second = [e for e in events(out) if e["run"] not in first_run]
    started_again = {e["student"] for e in second if e["event"] == "start"}
    assert started_again == set(CORPUS) - done_before  # nothing finished is graded again
    assert {s: (out / s / "results.json").stat().st_mtime_ns for s in done_before} == stamps
    graded = Counter(e["student"] for e in events(out) if e["event"] == "graded")
    if sig == signal.SIGINT:
        assert graded == Counter(list(CORPUS))  # each exactly once
    else:  # a SIGKILL may fall between putting a result in place and logging it: never twice
        assert max(graded.values()) == 1 and set(CORPUS) - set(graded) <= done_before
    assert comparable(gradebook(out)) == comparable(gradebook(one_worker))
    assert not (out / ".scratch").exists()


# ------------------------------------------------------------------------------------------- chromium

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")


def chromium() -> str:
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.skip("chromium is not installed (Debian: apt-get install chromium)")


def test_class_report_in_chromium(one_worker: Path, tmp_path: Path) -> None:
    base = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    page = (one_worker / "class_report.html").as_uri()
    dom = subprocess.run([*base, "--dump-dom", page], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    shot = tmp_path / "class_report.png"
    subprocess.run([*base, f"--screenshot={shot}", "--window-size=1200,1600", page], capture_output=True,
                   timeout=120, check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = dom[dom.index('<table id="trap-frequencies">'):]
    table = table[:table.index("</table>")]
    for trap, student in (("import-fails", "bob"), ("crash", "carol"), ("missing-symbol", "dave")):
        row = table[table.index(f'<tr data-trap="{trap}">'):]
        row = row[:row.index("</tr>")]
        assert f'<a href="{student}/report.html">{student}</a>' in row, row
        assert '<td class="num">1</td>' in row and "25%" in row
    assert table.count("<tr data-trap=") == 3
    assert '<table id="case-pass-rates">' in dom and '<table id="histogram">' in dom
    assert "4 students · 4 graded" in dom


# ------------------------------------------------------------------------------------------- isolation

SNOOPER = '''import os
def ls(path):
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        return type(exc).__name__
raise RuntimeError(f"SUBMISSIONS={ls(%r)} OUT={ls(%r)}")
'''


def test_student_code_cannot_see_the_class_or_the_results(repo_root: Path, corpus: Path,
                                                          tmp_path: Path) -> None:
    from grader.worker_client import _namespaces_available

    if not _namespaces_available():
        pytest.skip("the worker hides folders only when the grader runs as root with unshare available")
    submissions, out = tmp_path / "class", tmp_path / "out"
    submissions.mkdir()
    shutil.copyfile(corpus / "bob.py", submissions / "bob.py")
    (submissions / "eve.py").write_text(SNOOPER % (str(submissions), str(out)), encoding="utf-8")
    code, printed = run_batch(repo_root, submissions, out, "--workers", "2")
    assert code == 0, printed
    grade = json.loads((out / "eve" / "grade.json").read_text(encoding="utf-8"))
    assert "SUBMISSIONS=[] OUT=[]" in grade["cases"][0]["message"]  # empty folders mounted over both
