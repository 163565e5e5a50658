"""`grader check`'s kept Triton caches: a check's worker and kernel hosts compile into caches kept between checks, so
a second check of unchanged kernels on a GPU compiles nothing (grader.running.processes.sandbox takes them)."""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from pathlib import Path

from grader.running.processes.confinement import Identity, sandbox_parent

# `grader check`'s kept Triton caches start again empty past this size (a student's every edit compiles anew).
KEPT_CACHE_BYTES = 1 << 30


def kept_cache_folders(kept: Path, identity: Identity | None = None) -> tuple[Path, Path]:
    """`grader check`'s Triton caches (made 0700; emptied past KEPT_CACHE_BYTES): the one its worker compiles into and
    the one its kernel hosts do. Kept between checks, so a second check of unchanged kernels on a GPU compiles
    nothing. Only `grader check` keeps them (its verdict is the student's own feedback, on the student's machine, like
    its compile memo, grader.operations.compile_memo); a grade, a batch and every autograder compile into caches of
    the grade's own, and the kernel hosts' is then one no worker can find (Sandbox.clean_folder).
    With `identity` (the grader is root and its sandboxes run as another user: a notebook's root, say) they are the
    sandbox user's, in a folder under sandbox_parent() (which that user can pass through but not list, where `kept`,
    in root's home, it cannot reach) whose name is random, kept in `kept` (so a grade's sandbox on the same machine
    cannot find it); what a sandbox left there that is not that user's own folder (a link, say) is removed, never
    followed."""
    folder = kept if identity is None else sandbox_parent() / f"{kept.name}-{identity.uid}-{_name_in(kept)}"
    _kept_folder(folder, identity)
    try:
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    except OSError:
        size = 0
    if size > KEPT_CACHE_BYTES:
        shutil.rmtree(folder, ignore_errors=True)
        _kept_folder(folder, identity)
    caches = (folder / "worker", folder / "kernels")
    for cache in caches:
        _kept_folder(cache, identity)
    return caches


def _kept_folder(folder: Path, identity: Identity | None) -> None:
    """`folder` made a real folder (0700) of `identity` (the grader's user when None); anything else found there is
    removed first."""
    uid = os.geteuid() if identity is None else identity.uid
    try:
        found = os.lstat(folder)
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != uid:
            if stat.S_ISDIR(found.st_mode):
                shutil.rmtree(folder)
            else:
                folder.unlink()
    except FileNotFoundError:
        pass
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if identity is not None:
        os.chown(folder, identity.uid, identity.gid, follow_symlinks=False)


def _name_in(kept: Path) -> str:
    """A random name for the sandbox user's kept caches, kept in `kept` (the grader's own folder, 0700)."""
    _kept_folder(kept, None)
    record = kept / "sandbox-caches-name"
    try:
        name = record.read_text(encoding="ascii").strip()
        if len(name) == 32 and all(c in "0123456789abcdef" for c in name):
            return name
    except (OSError, UnicodeDecodeError):
        pass
    name = secrets.token_hex(16)
    record.write_text(name, encoding="ascii")
    return name
