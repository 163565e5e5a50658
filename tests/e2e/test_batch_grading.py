"""`grader batch` end to end on four real submissions (the reference and three fast mutants, copied
into tmp_path): 1 and 2 workers give the same gradebook; a re-run grades nothing; a batch interrupted at
chosen points (SIGINT mid-batch, inside a commit and while the gradebook is written; SIGKILL inside a
commit) loses nothing and its re-run grades every submission exactly once; a local Ray instance gives
the same gradebook; the class report opens in headless chromium.

Each batch grades for ~30 s on a 2-core machine, so the one-worker batch is graded once per module
and the other runs are compared with it.
"""

from __future__ import annotations

import ast
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
import ray  # noqa: F401  (the `ray` extra, which the test install has: the Ray executor is tested for real)

from grader.cli import main
from grader.operations import batch
from grader.publishing.gradebook import RUN_DETAIL_FIELDS
from tests.conftest import chromium, corpus_mutant, skip_outside_ci

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
    assert header.startswith("student,name,email,sid,section,status,score,max_score,fused_linear_gelu_kernel,")
    assert not (one_worker / ".scratch").exists() and not (one_worker / ".batch.lock").exists()
    for student in CORPUS:  # each graded under the name of the student's own file, as `grader grade` would
        grade = json.loads((one_worker / student / "grade.json").read_text(encoding="utf-8"))
        assert grade["submission"] == f"{student}.py"
        report = (one_worker / student / "report.html").read_text(encoding="utf-8")
        assert f"submission <code>{student}.py</code>" in report


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
    assert "on 2 local workers;" in printed
    assert comparable(gradebook(tmp_path / "out")) == comparable(gradebook(one_worker))


def test_processes_started_afresh_give_the_same_gradebook(one_worker: Path, repo_root: Path, corpus: Path,
                                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One grade per file whichever way a batch starts its processes: the one-worker batch forked its children from
    the child template and (as root, isolated) its sandbox zygotes from the zygote template
    (grader.operations.batch_helpers); started afresh, every grade is the same."""
    from grader.operations import batch_helpers

    monkeypatch.setenv(batch_helpers.TEMPLATE_VARIABLE, "0")
    monkeypatch.setenv(batch_helpers.SANDBOX_TEMPLATE_VARIABLE, "0")
    code, printed = run_batch(repo_root, corpus, tmp_path / "out", "--workers", "2")
    assert code == 0, printed
    assert comparable(gradebook(tmp_path / "out")) == comparable(gradebook(one_worker))


def test_ray_executor_gives_the_same_gradebook(one_worker: Path, repo_root: Path, corpus: Path,
                                               tmp_path: Path) -> None:
    code, printed = run_batch(repo_root, corpus, tmp_path / "out", "--executor", "ray", "--workers", "2")
    assert code == 0, printed
    assert "on a local Ray instance;" in printed
    assert comparable(gradebook(tmp_path / "out")) == comparable(gradebook(one_worker))


def test_ray_leaves_the_batch_its_sigterm_handler(corpus: Path, repo_root: Path) -> None:
    """ray.init makes SIGTERM sys.exit(); while grading on Ray, SIGTERM must still stop the batch like Ctrl-C."""
    from grader.operations.executors import GradeJob, RayExecutor

    job = GradeJob("bob", corpus / "bob.py", "fused_layers", repo_root / "assignments",
                   "interpreter", int(SEED), 120)
    seen = []

    class Seen(Exception):
        pass

    def on_start(_job: GradeJob, _device: str) -> None:
        seen.append(signal.getsignal(signal.SIGTERM))
        raise Seen  # stop as soon as the task is submitted (the executor cancels it)

    with batch.catching_interrupts() as interrupts, pytest.raises(Seen):
        for _ in RayExecutor(None, 1, num_cpus=1).run([job], on_start):
            pass
    assert seen == [interrupts.on_signal]


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


# GRADER_BATCH_INTERRUPT_AT (read by grader.operations.batch: the batch signals itself at that point, so the test
# never races it) -> how many results are in place when the batch stops (2 workers, 4 students)
INTERRUPTIONS = {
    "graded:1": 1,  # SIGINT mid-batch, right after the first result is committed and logged
    "commit:2": 2,  # SIGINT between putting the second result in place and logging it: held till logged
    "gradebook": 4,  # SIGINT after the last grade, while the gradebook and class report are written
    "commit:2/SIGKILL": 2,  # killed between putting the second result in place and logging it
}


@pytest.mark.parametrize("interrupt_at", list(INTERRUPTIONS))
def test_interrupted_batch_resumes_and_grades_each_submission_once(
        interrupt_at: str, one_worker: Path, repo_root: Path, corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    marker = f"GRADER_KILL_TEST={uuid.uuid4().hex}"
    env = {**os.environ, marker.split("=")[0]: marker.split("=")[1], "GRADER_BATCH_INTERRUPT_AT": interrupt_at}
    command = [sys.executable, "-m", "grader", *batch_argv(repo_root, corpus, out, "--workers", "2")]
    first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=400)
    printed = first.stdout + first.stderr
    deadline = time.monotonic() + 20
    while processes_with(marker) and time.monotonic() < deadline:  # children die with the batch
        time.sleep(0.1)
    assert processes_with(marker) == []

    done_before = {s for s in CORPUS if (out / s / "results.json").is_file()}
    assert len(done_before) == INTERRUPTIONS[interrupt_at], printed
    logged = {e["student"] for e in events(out) if e["event"] == "graded"}
    if interrupt_at.endswith("/SIGKILL"):
        assert first.returncode == -signal.SIGKILL, printed
        assert len(done_before - logged) == 1 and logged < done_before  # the last result was never logged
    else:
        assert first.returncode == 130, printed
        assert logged == done_before  # a signal inside a commit waits for its log line
        assert f"interrupted: graded {len(done_before)}, failed 0, skipped 0" in first.stdout, printed
        pending = len(CORPUS) - len(done_before)
        book = gradebook(out)  # written whole on the way out, from what DIR holds
        assert book["summary"]["pending"] == pending
        assert {r["student"] for r in book["rows"] if r["status"] == "graded"} == done_before
        report = (out / "class_report.html").read_text(encoding="utf-8")
        assert f"{len(CORPUS)} students · {len(done_before)} graded" in report
        assert ("re-run the same command to finish" in first.stdout) == (pending > 0), printed
        assert ("nothing is left to grade: the gradebook is complete" in first.stdout) == (pending == 0), printed
        assert "Traceback" not in printed
    stamps = {s: (out / s / "results.json").stat().st_mtime_ns for s in done_before}
    first_run = {e["run"] for e in events(out)}

    code, rerun = run_batch(repo_root, corpus, out)
    assert code == 0, rerun
    second = [e for e in events(out) if e["run"] not in first_run]
    started_again = Counter(e["student"] for e in second if e["event"] == "start")
    assert started_again == Counter(set(CORPUS) - done_before)  # the rest once each, nothing finished again
    assert {s: (out / s / "results.json").stat().st_mtime_ns for s in done_before} == stamps
    graded = Counter(e["student"] for e in events(out) if e["event"] == "graded")
    assert graded == Counter(logged | (set(CORPUS) - done_before))  # each once; a SIGKILLed log line stays lost
    assert comparable(gradebook(out)) == comparable(gradebook(one_worker))
    assert not (out / ".scratch").exists()


def test_interrupted_only_where_the_batch_allows_it() -> None:
    """`Interrupts`: a signal is recorded anywhere; it raises only inside allowed() (on entry when it came
    before), waits for the end of a held() block, and only the first one raises."""
    with batch.catching_interrupts() as early:
        os.kill(os.getpid(), signal.SIGTERM)  # e.g. during discovery: recorded, nothing raised
        assert early.received
        with pytest.raises(KeyboardInterrupt), early.allowed():
            pytest.fail("grading started although a signal was waiting")
    steps = []
    before = signal.getsignal(signal.SIGINT)  # default_int_handler; SIG_IGN in a pytest-xdist worker
    with batch.catching_interrupts() as interrupts:
        with pytest.raises(KeyboardInterrupt), interrupts.allowed(), interrupts.held():
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("commit finished")
        os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C on the way out: recorded only
        steps.append("way out finished")
    assert steps == ["commit finished", "way out finished"]
    assert signal.getsignal(signal.SIGINT) is before  # put back


def test_interrupted_at_a_chosen_point_only() -> None:
    assert batch.interrupt_signal("graded:1", "graded:1") is signal.SIGINT
    assert batch.interrupt_signal("commit:2/SIGKILL", "commit:2") is signal.SIGKILL
    assert batch.interrupt_signal("graded:1", "graded:11") is None
    assert batch.interrupt_signal("gradebook", "commit:1") is None
    assert batch.interrupt_signal("", "gradebook") is None


# ------------------------------------------------------------------------------------------- chromium

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")




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
    from grader.running.processes.confinement import namespaces_available as _namespaces_available

    if not _namespaces_available():
        skip_outside_ci("the worker hides folders only when the grader runs as root with unshare available")
    submissions, out = tmp_path / "class", tmp_path / "out"
    submissions.mkdir()
    shutil.copyfile(corpus / "bob.py", submissions / "bob.py")
    (submissions / "eve.py").write_text(SNOOPER % (str(submissions), str(out)), encoding="utf-8")
    code, printed = run_batch(repo_root, submissions, out, "--workers", "2")
    assert code == 0, printed
    grade = json.loads((out / "eve" / "grade.json").read_text(encoding="utf-8"))
    assert "SUBMISSIONS=[] OUT=[]" in grade["cases"][0]["message"]  # empty folders mounted over both


REACHER = '''import json, os, signal, struct, _socket  # past the harness's guard on socket.socket
signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a refused write is an error to read, not the end
def reach():
    tried = {}
    request = json.dumps({"op": "start_zygote", "backend": "interpreter", "env": {}, "cwd": "/", "log": "/dev/null",
                          "hide": [], "uid": None, "gid": None, "file_limit": 1 << 20, "cpu_limit_s": 60}).encode()
    for name in sorted(os.listdir("/tmp")):
        if name.startswith("grader-zygote"):
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            sock.settimeout(20)
            try:
                sock.connect(f"/tmp/{name}/listening.sock")
                sock.sendall(struct.pack("<I", len(request)) + request)
                tried[name] = "answered" if sock.recv(65536) else "closed"
            except OSError as exc:
                tried[name] = type(exc).__name__
            finally:
                sock.close()
    return tried
raise RuntimeError(f"REACHED={reach()}")
'''


def test_student_code_cannot_get_a_zygote_from_the_batchs_template(repo_root: Path, corpus: Path,
                                                                    tmp_path: Path) -> None:
    """The batch's zygote template listens in a folder of /tmp that only the grader's user can enter
    (grader.running.processes.shared_zygote), and serves no process of another PID namespace: a submission that finds
    it (here the sandbox may run as the grader's user, root: the folder's mode does not stop it) gets no zygote."""
    from grader.running.processes.confinement import namespaces_available as _namespaces_available

    if not _namespaces_available():
        skip_outside_ci("the zygote template is started only where sandboxes are isolated (root, unshare)")
    submissions, out = tmp_path / "class", tmp_path / "out"
    submissions.mkdir()
    shutil.copyfile(corpus / "bob.py", submissions / "bob.py")
    (submissions / "mallory.py").write_text(REACHER, encoding="utf-8")
    code, printed = run_batch(repo_root, submissions, out, "--workers", "2")
    assert code == 0, printed
    message = json.loads((out / "mallory" / "grade.json").read_text(encoding="utf-8"))["cases"][0]["message"]
    reached = ast.literal_eval(message.rsplit("REACHED=", 1)[1].split("}", 1)[0] + "}")
    assert any(name.startswith("grader-zygote_template-") for name in reached), message  # it was there to find
    assert "answered" not in reached.values(), reached  # refused, unreachable, or a stale socket: never served
