"""grader/running/processes/kept_caches.py: `grader check` keeps its Triton caches between checks, so a second check
of unchanged kernels on a GPU compiles nothing; a grade's caches die with its sandbox; where the grader is root and its
sandboxes run as another user, the caches are that user's, reachable by it, and nothing it plants is followed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from grader.running.processes import kept_caches as sandboxes
from grader.running.processes.confinement import Identity, sandbox_parent
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


NOBODY = Identity(65534, 65534)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")


@as_root
def test_a_sandbox_users_kept_caches_are_its_own_where_it_can_reach_them(tmp_path: Path) -> None:
    """The grader is root, its sandboxes `nobody`: `kept` (in root's home, say) is out of their reach, so the caches
    are `nobody`'s, 0700, in a folder of kept's name under the sandboxes' folder, and kept between calls."""
    kept = tmp_path / f"check-triton-{os.getpid()}"
    worker, kernels = sandboxes.kept_cache_folders(kept, NOBODY)
    try:
        assert worker.parent == kernels.parent and worker.parent.parent == sandbox_parent()
        name = (kept / "sandbox-caches-name").read_text(encoding="ascii")  # random, kept in the grader's own folder
        assert worker.parent.name == f"{kept.name}-{NOBODY.uid}-{name}" and len(name) == 32
        for folder in (worker.parent, worker, kernels):
            found = folder.lstat()
            assert (found.st_uid, found.st_gid, oct(found.st_mode & 0o777)) == (NOBODY.uid, NOBODY.gid, "0o700")
        (kernels / "compiled.cubin").write_bytes(b"\0" * 8)
        assert sandboxes.kept_cache_folders(kept, NOBODY) == (worker, kernels)
        assert (kernels / "compiled.cubin").exists() and not (kept / "worker").exists()
    finally:
        shutil.rmtree(worker.parent, ignore_errors=True)


@as_root
def test_what_a_sandbox_planted_in_its_kept_caches_is_removed_never_followed(tmp_path: Path) -> None:
    """A sandbox owns its kept folder, so it can put a link where a cache was (to /etc, say): root must not give the
    link's target to the sandbox user, nor write through it; the cache is made again, a real folder."""
    kept = tmp_path / f"check-triton-{os.getpid()}"
    worker, kernels = sandboxes.kept_cache_folders(kept, NOBODY)
    target = tmp_path / "roots-own"
    target.mkdir(mode=0o755)
    (target / "precious").write_text("root's", encoding="utf-8")
    try:
        os.rmdir(worker)
        worker.symlink_to(target)
        shutil.rmtree(kernels)
        kernels.mkdir()  # a folder, but root's: not the sandbox user's own
        assert sandboxes.kept_cache_folders(kept, NOBODY) == (worker, kernels)
        assert not worker.is_symlink() and worker.is_dir() and worker.lstat().st_uid == NOBODY.uid
        assert kernels.lstat().st_uid == NOBODY.uid
        assert target.stat().st_uid == 0 and (target / "precious").read_text(encoding="utf-8") == "root's"
    finally:
        shutil.rmtree(worker.parent, ignore_errors=True)


@as_root
def test_a_sandboxs_folders_are_given_to_its_user_without_following_links(tmp_path: Path) -> None:
    """Sandbox._own gives a folder to the sandbox user; a link in its place (planted) is changed itself, not its
    target."""
    options = WorkerOptions(backend="cuda", import_timeout_s=60, sandbox_user=None)
    box = Sandbox(options)
    box.identity = NOBODY
    target = tmp_path / "roots-own"
    target.mkdir()
    link = tmp_path / "planted"
    link.symlink_to(target)
    try:
        box._own([link])
        assert target.stat().st_uid == 0 and link.lstat().st_uid == NOBODY.uid
    finally:
        box.identity = None
        box.close()
