"""grader/running/processes/sandbox.py's kept caches: `grader check` keeps its Triton caches between checks, so a
second check of unchanged kernels on a GPU compiles nothing; a grade's caches die with its sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.running.processes import sandbox as sandboxes
from grader.running.processes.sandbox import Sandbox, WorkerOptions


def test_a_checks_caches_outlive_its_sandbox_and_a_grades_do_not(tmp_path: Path) -> None:
    kept = tmp_path / "check-triton"
    options = WorkerOptions(backend="cuda", import_timeout_s=60, sandbox_user=None)
    first = Sandbox(options, kept_caches=kept)
    assert first.triton_cache == kept / "worker"
    host = first.clean_folder()
    assert first.clean_cache == kept / "kernels"
    assert first.environment(host, "cuda")["TRITON_CACHE_DIR"] == str(kept / "kernels")
    assert first.environment(first.worker_folder(), "cuda")["TRITON_CACHE_DIR"] == str(kept / "worker")
    (kept / "kernels" / "compiled.cubin").write_bytes(b"\0" * 8)
    first.close()
    second = Sandbox(options, kept_caches=kept)
    second.clean_folder()
    assert (second.clean_cache / "compiled.cubin").exists()  # type: ignore[operator]
    second.close()
    grade = Sandbox(options)
    grade.clean_folder()
    own = (grade.triton_cache, grade.clean_cache)
    assert kept not in own[0].parents and own[1] is not None and kept not in own[1].parents
    grade.close()
    assert not own[0].exists() and not own[1].exists()


def test_kept_caches_start_again_empty_past_their_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandboxes, "KEPT_CACHE_BYTES", 100)
    worker, kernels = sandboxes.kept_cache_folders(tmp_path / "kept")
    (kernels / "small").write_bytes(b"\0" * 60)
    sandboxes.kept_cache_folders(tmp_path / "kept")
    assert (kernels / "small").exists()
    (worker / "more").write_bytes(b"\0" * 60)
    sandboxes.kept_cache_folders(tmp_path / "kept")
    assert worker.is_dir() and kernels.is_dir() and not any(kernels.iterdir()) and not any(worker.iterdir())
    assert oct((tmp_path / "kept" / "worker").stat().st_mode & 0o777) == "0o700"
