"""Hostile submissions (issue 7): each file in tests/hostile/ is the reference plus one attack.

Every file starts with `# attack: <what>` and `# expect: <trap ids or none>`. Each is graded once,
end to end, and the test asserts the honest outcome: the score never exceeds what the submission's
own computation earns (compared case by case with the reference's run), the diagnosis names the
expected traps, and the grader finishes with complete results whatever the submission did.

Most files are graded in this process through `grader.cli.main` (the `grade_text` fixture). Four
are graded by a `python -m grader grade ... --out out` subprocess instead, because the attack needs
the deployment's shape: the grader's command line naming the output folder, a secret in the
grader's initial environment (what /proc/<pid>/environ shows; `os.environ` changes made by a test do
not appear there), or a grader process that the submission may try to kill without taking pytest
with it.

Placeholders `__HOSTILE_MARKER__` and `__HOSTILE_PORT__` in a file are replaced with a unique marker
and the port a test listens on.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from grader.authoring.catalog import trap_catalog
from grader.authoring.spec import Assignment, load_assignment
from tests.conftest import ROOT, Graded, all_traps, read_results

HOSTILE = ROOT / "tests" / "hostile"
OUTPUT_FILES = {"results.json", "grade.json", "report.md", "report.html", "pytest-report.json"}
FILE_SIZE_LIMIT = 64 << 20  # grader.running.processes.confinement.WORKER_OUTPUT_LIMIT_BYTES (RLIMIT_FSIZE)
SUBPROCESS_TIMEOUT_S = 300


@functools.cache
def fused_layers() -> Assignment:
    return load_assignment(ROOT / "assignments" / "fused_layers" / "assignment.toml")


# ------------------------------------------------------------------------------------ helpers


def hostile_files() -> list[Path]:
    return sorted(HOSTILE.glob("*.py"))


def header(path: Path) -> tuple[str, set[str]]:
    """The `# attack:` text and the `# expect:` trap ids of a hostile file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# attack: "), f"{path.name}: line 1 must be '# attack: ...'"
    assert lines[1].startswith("# expect: "), f"{path.name}: line 2 must be '# expect: ...'"
    expect = lines[1].removeprefix("# expect: ").strip()
    traps = set() if expect == "none" else {t.strip() for t in expect.split(",")}
    return lines[0].removeprefix("# attack: "), traps


def hostile_text(name: str, marker: str = "", port: int = 0) -> str:
    text = (HOSTILE / name).read_text(encoding="utf-8")
    if "__HOSTILE_MARKER__" in text:
        assert marker, f"{name} needs a marker"
        text = text.replace("__HOSTILE_MARKER__", marker)
    if "__HOSTILE_PORT__" in text:
        assert port, f"{name} needs a port"
        text = text.replace("__HOSTILE_PORT__", str(port))
    return text


def new_marker() -> str:
    return f"hostile-{uuid.uuid4().hex[:12]}"


def spec_cases(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """results.json's tests keyed by case id, without the zero-point GPU compile checks."""
    return {t["extra_data"]["case_id"]: t for t in results["tests"]
            if not t["extra_data"]["case_id"].startswith("gpu-compile-")}


def assert_expected_traps(name: str, results: dict[str, Any]) -> None:
    """The run names exactly the `# expect:` traps, give or take the assignment's formula traps (which
    trap signatures may name beside an output the kernel never wrote: that is diagnosis, not security)."""
    _, expected = header(HOSTILE / name)
    named = set(all_traps(results))
    assert expected <= named, (name, sorted(named))
    assert named - expected <= set(fused_layers().traps), (name, sorted(named - expected))


def assert_outcome(results: dict[str, Any], reference: Graded, failing: dict[str, set[str]],
                   everything_fails: bool = False) -> None:
    """Cases of a target in `failing` score 0 and carry (at least) its traps; with `everything_fails`
    every case scores 0 (the submission's own kernels compute nothing); all other cases score exactly
    what the reference scores. Never above the reference, case by case and in total."""
    ours, theirs = spec_cases(results), spec_cases(reference.results)
    assert set(ours) == set(theirs), "every case of the battery must be in the results"
    for case_id, test in ours.items():
        target = test["extra_data"]["target"]
        ref = theirs[case_id]
        assert test["score"] <= ref["score"], (case_id, test["score"], test["output"])
        if target in failing or everything_fails:
            assert test["score"] == 0 and test["status"] == "failed", (case_id, test["output"])
            missing = failing.get(target, set()) - set(test["tags"])
            assert not missing, (case_id, test["tags"], test["output"])
        else:
            assert (test["score"], test["status"]) == (ref["score"], "passed"), (case_id, test["output"])
    assert results["score"] == sum(t["score"] for t in results["tests"])
    assert results["score"] <= reference.results["score"]


def without_pytest_variables(environment: Any) -> dict[str, str]:
    return {k: v for k, v in environment.items() if not k.startswith("PYTEST_")}


def live_processes_with(marker: str) -> list[int]:
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != b"Z":
            pids.append(int(entry.name))
    return pids


def kill_marked(marker: str) -> None:
    """Clean up after a failing daemon test: kill the processes this test's submission started (they carry
    the test's unique marker in their command line) and reap those re-parented to this process."""
    killed = live_processes_with(marker)
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.2)
    for pid in killed:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


@pytest.fixture
def grade_subprocess(tmp_path: Path) -> Callable[..., tuple[subprocess.CompletedProcess[str], Path]]:
    """`grade_subprocess(text, env={...})`: `python -m grader grade fused_layers.py --out out` run in
    tmp_path, as a user or Gradescope's run_autograder would; its own TMPDIR, the extra environment in
    its initial environment. Returns the finished process and the output folder."""

    def grade(text: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], Path]:
        submission = tmp_path / "fused_layers.py"
        submission.write_text(text, encoding="utf-8")
        grader_tmp = tmp_path / "grader-tmp"
        grader_tmp.mkdir()
        environment = without_pytest_variables(os.environ)
        environment.update(env or {}, TMPDIR=str(grader_tmp))
        proc = subprocess.run(
            [sys.executable, "-m", "grader", "--assignments", str(ROOT / "assignments"), "grade",
             submission.name, "--assignment", "fused_layers", "--out", "out", "--seed", "3",
             "--backend", "interpreter"],
            cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S,
            check=False,
        )
        return proc, tmp_path / "out"

    return grade


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.setblocking(False)
    yield server
    server.close()


def accepted_connections(server: socket.socket) -> list[bytes]:
    got = []
    while True:
        try:
            conn, _ = server.accept()
        except BlockingIOError:
            return got
        conn.settimeout(1)
        try:
            got.append(conn.recv(100))
        except OSError:
            got.append(b"")
        conn.close()


# ------------------------------------------------------------------------------------ fast


def test_every_hostile_file_is_well_formed_and_tested() -> None:
    known = set(trap_catalog(fused_layers())) | {"tampering"}
    tests = set(re.findall(r"^def (test_\w+)\(", Path(__file__).read_text(encoding="utf-8"), re.M))
    files = hostile_files()
    assert len(files) >= 16
    for path in files:
        attack, traps = header(path)
        assert attack.strip(), path.name
        assert traps <= known, (path.name, traps - known)
        assert f"test_{path.stem}" in tests, f"{path.name} has no test_{path.stem}"
        text = path.read_text(encoding="utf-8")
        for name in ("fused_linear_gelu_kernel", "fused_linear_gelu", "row_mean_var_kernel", "row_mean_var",
                     "layernorm_forward_kernel", "layernorm"):
            assert re.search(rf"^def {name}\(", text, re.M), (path.name, name)


def test_header_parsing(tmp_path: Path) -> None:
    path = tmp_path / "x.py"
    path.write_text("# attack: something\n# expect: crash, timeout\n", encoding="utf-8")
    assert header(path) == ("something", {"crash", "timeout"})
    path.write_text("# attack: something\n# expect: none\n", encoding="utf-8")
    assert header(path) == ("something", set())
    path.write_text("# expect: none\n# attack: swapped\n", encoding="utf-8")
    with pytest.raises(AssertionError):
        header(path)


def _fake_results(scores: dict[str, tuple[float, list[str]]]) -> dict[str, Any]:
    tests = [{"score": score, "max_score": 1.0, "status": "passed" if score and not tags else "failed",
              "tags": tags, "output": "", "extra_data": {"case_id": case_id, "target": case_id.split("-")[0]}}
             for case_id, (score, tags) in scores.items()]
    return {"score": sum(t["score"] for t in tests), "tests": tests}


def test_assert_outcome_compares_case_by_case_with_the_reference() -> None:
    reference = Graded(0, _fake_results({"a-1": (1.0, []), "b-1": (1.0, [])}), Path("."), "")
    assert_outcome(_fake_results({"a-1": (0.0, ["crash"]), "b-1": (1.0, [])}), reference, {"a": {"crash"}})
    with pytest.raises(AssertionError):  # the failing target kept its points
        assert_outcome(_fake_results({"a-1": (1.0, []), "b-1": (1.0, [])}), reference, {"a": {"crash"}})
    with pytest.raises(AssertionError):  # failed, but not with the expected trap
        assert_outcome(_fake_results({"a-1": (0.0, ["timeout"]), "b-1": (1.0, [])}), reference,
                       {"a": {"crash"}})
    with pytest.raises(AssertionError):  # an untouched target lost points
        assert_outcome(_fake_results({"a-1": (0.0, ["crash"]), "b-1": (0.0, ["crash"])}), reference,
                       {"a": {"crash"}})
    with pytest.raises(AssertionError):  # everything must fail
        assert_outcome(_fake_results({"a-1": (0.0, ["crash"]), "b-1": (1.0, [])}), reference,
                       {"a": {"crash"}}, everything_fails=True)
    with pytest.raises(AssertionError):  # a case is missing from the results
        assert_outcome(_fake_results({"a-1": (0.0, ["crash"])}), reference, {"a": {"crash"}})


def test_hostile_text_fills_placeholders() -> None:
    text = hostile_text("opens_sockets_and_changes_environment.py", port=4321)
    assert "__HOSTILE_PORT__" not in text and 'int("4321")' in text
    with pytest.raises(AssertionError):
        hostile_text("spawns_daemons.py")  # needs a marker


# -------------------------------------------------------------------------------- answers without computing


@pytest.mark.slow
def test_reads_reference_from_disk(grade_text, reference_graded) -> None:
    graded = grade_text(hostile_text("reads_reference_from_disk.py"))
    assert graded.exit_code == 0
    # Honest score 0: the kernels store nothing. 40/40 means the worker read and ran reference/.
    assert graded.results["score"] == 0, "the worker could read reference/fused_layers/reference.py from disk"
    assert_outcome(graded.results, reference_graded, {}, everything_fails=True)
    assert_expected_traps("reads_reference_from_disk.py", graded.results)


@pytest.mark.slow
def test_imports_reference(grade_text, reference_graded) -> None:
    graded = grade_text(hostile_text("imports_reference.py"))
    assert graded.exit_code == 0
    assert_outcome(graded.results, reference_graded, {}, everything_fails=True)
    for test in spec_cases(graded.results).values():
        assert test["tags"] == ["import-fails"], test["tags"]
        assert "importing 'reference' is not allowed in a submission" in test["output"], test["output"]
    assert_expected_traps("imports_reference.py", graded.results)


@pytest.mark.slow
def test_replays_cached_outputs(grade_text, reference_graded) -> None:
    marker = new_marker()
    cache = Path(f"/tmp/{marker}-cache")
    try:
        text = hostile_text("replays_cached_outputs.py", marker=marker)
        first = grade_text(text)
        assert_outcome(first.results, reference_graded, {})  # nothing cached yet: it computes honestly
        second = grade_text(text)  # same seed, same inputs: every wrapper output can be replayed
        if not list(cache.glob("*.pt")):  # the worker's /tmp is private: nothing survived the first run
            assert_outcome(second.results, reference_graded, {})
            return
        replayed = {"fused_linear_gelu": {"not-fused"}, "row_mean_var": {"not-fused"}}
        assert_outcome(second.results, reference_graded, replayed)
        for test in spec_cases(second.results).values():
            if test["extra_data"]["target"] in replayed:
                assert "launched no Triton kernel" in test["output"], test["output"]
        assert_expected_traps("replays_cached_outputs.py", second.results)
    finally:
        for path in cache.glob("*.pt"):
            path.unlink()
        if cache.exists():
            cache.rmdir()


# -------------------------------------------------------------------------------- tampering with the checks


@pytest.mark.slow
def test_monkeypatches_checks(grade_text, reference_graded) -> None:
    graded = grade_text(hostile_text("monkeypatches_checks.py"))
    assert graded.exit_code == 0
    assert_outcome(graded.results, reference_graded, {}, everything_fails=True)
    for test in spec_cases(graded.results).values():
        assert "unwritten-output" in test["tags"], (test["extra_data"]["case_id"], test["tags"])
    assert_expected_traps("monkeypatches_checks.py", graded.results)


@pytest.mark.slow
def test_returns_lying_objects(grade_text, reference_graded) -> None:
    graded = grade_text(hostile_text("returns_lying_objects.py"))
    assert graded.exit_code == 0
    wrappers = ("fused_linear_gelu", "row_mean_var", "layernorm")
    assert_outcome(graded.results, reference_graded, {target: {"bad-output"} for target in wrappers})
    by_target = {t["extra_data"]["target"]: t["output"] for t in spec_cases(graded.results).values()}
    assert "_LyingTensor" in by_target["fused_linear_gelu"]
    assert "not a torch.Tensor" in by_target["row_mean_var"]
    assert "sparse" in by_target["layernorm"].lower()
    assert_expected_traps("returns_lying_objects.py", graded.results)


@pytest.mark.slow
def test_modifies_inputs(grade_text, reference_graded) -> None:
    graded = grade_text(hostile_text("modifies_inputs.py"))
    assert graded.exit_code == 0
    assert_outcome(graded.results, reference_graded, {"layernorm_forward_kernel": {"writes-input"},
                                                      "layernorm": {"writes-input"}})
    assert_expected_traps("modifies_inputs.py", graded.results)


@pytest.mark.slow
def test_evades_fusion_check(grade_text, reference_graded) -> None:
    graded = grade_text(hostile_text("evades_fusion_check.py"))
    assert graded.exit_code == 0
    # Honest score 0: the kernels store nothing, the wrappers' values come from numpy/torch.
    wrappers = ("fused_linear_gelu", "row_mean_var", "layernorm")
    assert_outcome(graded.results, reference_graded, {target: {"not-fused"} for target in wrappers},
                   everything_fails=True)
    assert_expected_traps("evades_fusion_check.py", graded.results)


@pytest.mark.slow
def test_fakes_kernel_object(grade_text, reference_graded) -> None:
    graded = grade_text(hostile_text("fakes_kernel_object.py"))
    assert graded.exit_code == 0
    # Honest score 0: the @triton.jit kernels store nothing; torch computes every value.
    failing = {kernel: {"tampering"} for kernel in fused_layers().kernels}
    failing.update({function: {"not-fused"} for function in fused_layers().functions})
    assert_outcome(graded.results, reference_graded, failing, everything_fails=True)
    assert_expected_traps("fakes_kernel_object.py", graded.results)


@pytest.mark.slow
def test_forges_kernels_at_import(grade_text, reference_graded) -> None:
    graded = grade_text(hostile_text("forges_kernels_at_import.py"))
    assert graded.exit_code == 0
    # Honest score 0: the kernels store nothing. Module-level code that patches Triton's launch path runs only in the
    # submission's worker: kernel cases run in the kernel host (their outputs stay poisoned) and the wrappers'
    # values are not what the host's replay of their launches computes.
    failing = {kernel: {"unwritten-output"} for kernel in fused_layers().kernels}
    failing.update({function: {"not-fused"} for function in fused_layers().functions})
    assert_outcome(graded.results, reference_graded, failing, everything_fails=True)
    assert_expected_traps("forges_kernels_at_import.py", graded.results)


@pytest.mark.slow
def test_forges_worker_reply(grade_text, reference_graded) -> None:
    graded = grade_text(hostile_text("forges_worker_reply.py"))
    assert graded.exit_code == 0
    # The forged reply carries no launch record the grader can replay: the account was altered.
    assert_outcome(graded.results, reference_graded, {"row_mean_var": {"tampering"}}, everything_fails=True)
    assert_expected_traps("forges_worker_reply.py", graded.results)


@pytest.mark.slow
def test_writes_output_dir(grade_subprocess, reference_graded) -> None:
    proc, out = grade_subprocess(hostile_text("writes_output_dir.py"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {p.name for p in out.iterdir()} == OUTPUT_FILES, sorted(p.name for p in out.iterdir())
    for name in OUTPUT_FILES:
        path = out / name
        assert path.is_file() and not path.is_symlink(), name
        assert "HOSTILE-FORGED" not in path.read_text(encoding="utf-8"), name
    results = read_results(out / "results.json")
    assert results["extra_data"]["assignment"] == "fused_layers"
    assert_outcome(results, reference_graded, {})
    assert_expected_traps("writes_output_dir.py", results)


# ------------------------------------------------------------------------------------ breaking the run


@pytest.mark.slow
def test_exits_and_raises(grade_text, reference_graded) -> None:
    graded = grade_text(hostile_text("exits_and_raises.py"))
    assert graded.exit_code == 0
    failing = {"fused_linear_gelu": {"runtime-error"}, "row_mean_var": {"crash"},
               "layernorm": {"runtime-error"}}
    assert_outcome(graded.results, reference_graded, failing)
    cases = spec_cases(graded.results)
    for test in cases.values():
        if test["extra_data"]["target"] == "fused_linear_gelu":
            assert "raised SystemExit" in test["output"], test["output"]
        elif test["extra_data"]["target"] == "row_mean_var":
            assert "exit code 0" in test["output"], test["output"]
    # layernorm's cases raise, in spec order, each of its four exceptions once
    raised = [cases[c.id]["output"] for c in fused_layers().cases if c.target == "layernorm"]
    for output, what in zip(raised, ("raised KeyboardInterrupt", "<unprintable exception>",
                                     "stop grading, please", "raised GeneratorExit"), strict=True):
        assert what in output, output
    assert_expected_traps("exits_and_raises.py", graded.results)


@pytest.mark.slow
def test_hangs_ignoring_sigterm(grade_text, reference_graded) -> None:
    spec_timeout = fused_layers().call_timeout_s
    started = time.monotonic()
    graded = grade_text(hostile_text("hangs_ignoring_sigterm.py"))
    elapsed = time.monotonic() - started
    assert graded.exit_code == 0
    assert_outcome(graded.results, reference_graded, {"layernorm": {"timeout"}})
    hung = [t for t in spec_cases(graded.results).values() if t["extra_data"]["target"] == "layernorm"]
    for test in hung:
        assert f"Did not finish within {spec_timeout:g} s (layernorm(" in test["output"], test["output"]
        assert "the grader stopped it" in test["output"] and " while " not in test["output"]
    # each hanging case costs one call timeout; SIGTERM being ignored costs nothing (SIGKILL is used)
    assert elapsed < len(hung) * spec_timeout + 120, elapsed
    assert_expected_traps("hangs_ignoring_sigterm.py", graded.results)


@pytest.mark.slow
def test_spawns_daemons(grade_text, reference_graded) -> None:
    marker = new_marker()
    try:
        graded = grade_text(hostile_text("spawns_daemons.py", marker=marker))
        assert graded.exit_code == 0
        assert_outcome(graded.results, reference_graded, {})
        time.sleep(0.5)
        survivors = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[-2].decode()
                     for pid in live_processes_with(marker)}
        assert not survivors, f"processes started by the submission outlived the grading: {survivors}"
        assert_expected_traps("spawns_daemons.py", graded.results)
    finally:
        kill_marked(marker)


@pytest.mark.slow
def test_exhausts_resources(grade_text, reference_graded) -> None:
    marker = new_marker()
    outside = Path(f"/tmp/{marker}-big.bin")
    try:
        graded = grade_text(hostile_text("exhausts_resources.py", marker=marker))
        assert graded.exit_code == 0
        assert_outcome(graded.results, reference_graded, {"fused_linear_gelu": {"runtime-error"},
                                                          "row_mean_var": {"runtime-error"},
                                                          "layernorm": {"runtime-error"}})
        for test in spec_cases(graded.results).values():
            target, output = test["extra_data"]["target"], test["output"]
            if target == "fused_linear_gelu":
                assert "allocate" in output, output
            elif target in ("row_mean_var", "layernorm"):
                assert "File too large" in output, output
        assert (graded.out_dir / "results.json").stat().st_size < 1_000_000
        assert (graded.out_dir / "report.md").is_file()
        # RLIMIT_FSIZE stops each file at 64 MiB, in the sandbox and outside it (if /tmp is shared at all)
        assert not outside.exists() or outside.stat().st_size <= FILE_SIZE_LIMIT
        assert_expected_traps("exhausts_resources.py", graded.results)
    finally:
        outside.unlink(missing_ok=True)


@pytest.mark.slow
def test_kills_the_grader(grade_subprocess, reference_graded) -> None:
    proc, out = grade_subprocess(hostile_text("kills_the_grader.py"))
    assert proc.returncode == 0, f"the grader died (exit {proc.returncode}): {proc.stderr[-2000:]}"
    results = read_results(out / "results.json")
    assert_outcome(results, reference_graded, {})
    assert_expected_traps("kills_the_grader.py", results)


# ------------------------------------------------------------------------------------ reaching out


@pytest.mark.slow
def test_opens_sockets_and_changes_environment(grade_text, reference_graded, listener) -> None:
    port = listener.getsockname()[1]
    cwd, environment = os.getcwd(), without_pytest_variables(os.environ)
    graded = grade_text(hostile_text("opens_sockets_and_changes_environment.py", port=port))
    connections = accepted_connections(listener)
    assert graded.exit_code == 0
    # The attempts fail inside the submission and cost nothing: the computation is honest.
    assert_outcome(graded.results, reference_graded, {})
    assert connections == [], f"the submission reached 127.0.0.1:{port}: {connections}"
    # chdir, environment and umask changes stay in the worker
    assert os.getcwd() == cwd
    assert without_pytest_variables(os.environ) == environment
    assert_expected_traps("opens_sockets_and_changes_environment.py", graded.results)


@pytest.mark.slow
def test_reads_grader_environment(grade_subprocess, reference_graded) -> None:
    secret = f"s3cret-{uuid.uuid4().hex}"
    proc, out = grade_subprocess(hostile_text("reads_grader_environment.py"),
                                 env={"GRADER_HOSTILE_FAKE_SECRET": secret})
    assert proc.returncode == 0, proc.stderr[-3000:]
    for path in out.iterdir():
        text = path.read_text(encoding="utf-8")
        leaked = [line for line in text.splitlines() if secret in line][:1]
        assert not leaked, f"{path.name} shows the grader's secret: {leaked}"
    assert secret not in proc.stdout + proc.stderr
    results = read_results(out / "results.json")
    assert_outcome(results, reference_graded, {})
    assert_expected_traps("reads_grader_environment.py", results)

