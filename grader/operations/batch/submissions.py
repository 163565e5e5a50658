"""Finding a class's submissions in SUBMISSIONS: a folder of files, a folder of folders, a zip of either,
or Gradescope's export (folders plus submission_metadata.yml); one `Submission` per student."""

from __future__ import annotations

import hashlib
import re
import shutil
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from grader.operations.batch.folder import RESERVED, BatchError
from grader.operations.batch.gradescope_metadata import GRADESCOPE_METADATA, read_gradescope_metadata
from grader.operations.notebook import NOTEBOOK_SUFFIX, is_notebook
from grader.publishing.people import Student

IGNORED_NAMES = {"__MACOSX", "__pycache__"}

MAX_UNZIPPED_BYTES = 2 << 30


@dataclass(frozen=True)
class Submission:
    student: Student
    path: Path | None  # the file to grade; None when the student's folder holds none
    source: str  # where it was found, relative to SUBMISSIONS
    sha256: str = ""
    problem: str = ""  # why there is no file

    @property
    def id(self) -> str:
        return self.student.id

def student_id(raw: str) -> str:
    """A folder-safe id: letters, digits and `._@+-` kept, anything else `_`; no leading `.` or `-`."""
    cleaned = re.sub(r"[^A-Za-z0-9._@+-]", "_", raw.strip())
    return re.sub(r"^[.-]", "_", cleaned)

def _visible(path: Path) -> bool:
    return not path.name.startswith(".") and path.name not in IGNORED_NAMES

def notebook_name(submission_file: str) -> str:
    """The notebook a student may hand in instead of the assignment's file: `fused_layers.ipynb`."""
    return Path(submission_file).stem + NOTEBOOK_SUFFIX

def find_submission_file(folder: Path, submission_file: str) -> tuple[Path | None, str]:
    """The assignment's file in `folder` (shallowest first), else its notebook (`<stem>.ipynb`), else its only
    `.py`, else its only notebook; else why not."""
    def visible_files(pattern: str) -> list[Path]:
        return [p for p in folder.rglob(pattern)
                if p.is_file() and all(_visible(Path(part)) for part in p.relative_to(folder).parts)]

    found = visible_files("*.py")
    notebooks = visible_files("*" + NOTEBOOK_SUFFIX)
    for name in (submission_file, notebook_name(submission_file)):
        exact = sorted((p for p in found + notebooks if p.name == name), key=lambda p: (len(p.parts), str(p)))
        if exact:
            return exact[0], ""
    if len(found) == 1:
        return found[0], ""
    if not found and len(notebooks) == 1:
        return notebooks[0], ""
    if not found:
        return None, f"no {submission_file} (and no other .py file or notebook) in the submission"
    names = ", ".join(sorted(str(p.relative_to(folder)) for p in found)[:8])
    return None, f"no {submission_file}, and several .py files to choose from: {names}"

def unzip_safely(archive: Path, into: Path) -> Path:
    """Extract regular files only, refusing absolute paths, `..` and archives over MAX_UNZIPPED_BYTES."""
    try:
        zf = zipfile.ZipFile(archive)
    except zipfile.BadZipFile as exc:
        raise BatchError(f"{archive} is not a readable zip file: {exc}") from None
    with zf:
        members = [m for m in zf.infolist() if not m.is_dir()]
        if sum(m.file_size for m in members) > MAX_UNZIPPED_BYTES:
            raise BatchError(f"{archive} unpacks to more than {MAX_UNZIPPED_BYTES >> 30} GiB")
        for member in members:
            parts = Path(member.filename.replace("\\", "/")).parts
            mode = (member.external_attr >> 16) & 0o170000
            if not parts or member.filename.startswith("/") or ".." in parts or mode == 0o120000:
                continue  # absolute, escaping or a symlink: never extracted
            target = into.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(member) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
    return into

def _unwrap(root: Path, submission_file: str) -> Path:
    """Descend through folders that only wrap one folder (a zip's top-level folder), unless that folder
    looks like one student's (it holds the submission file, or just one .py and no folders)."""
    while not (root / GRADESCOPE_METADATA).exists():
        entries = [p for p in root.iterdir() if _visible(p)]
        if len(entries) != 1 or not entries[0].is_dir():
            break
        inner = [p for p in entries[0].iterdir() if _visible(p)]
        one_student = any((entries[0] / name).is_file() for name in (submission_file, notebook_name(submission_file))) \
            or (sum(p.suffix == ".py" for p in inner) == 1 and not any(p.is_dir() for p in inner))
        if one_student:
            break
        root = entries[0]
    return root

def discover_submissions(source: Path, submission_file: str, scratch: Path) -> list[Submission]:
    """Every student in SUBMISSIONS (a folder or a zip), sorted by id; zips are unpacked into `scratch`."""
    source = Path(source)
    if source.is_file() and zipfile.is_zipfile(source):
        root = unzip_safely(source, scratch / "unzipped")
    elif source.is_dir():
        root = source
    else:
        raise BatchError(f"{source} is neither a folder nor a zip file of submissions")
    root = _unwrap(root, submission_file)
    metadata_path = root / GRADESCOPE_METADATA
    metadata = read_gradescope_metadata(metadata_path.read_text(encoding="utf-8", errors="replace")) \
        if metadata_path.is_file() else {}
    submissions = []
    for entry in sorted(root.iterdir()):
        if not _visible(entry) or entry.name == GRADESCOPE_METADATA:
            continue
        path: Path | None
        if entry.is_file() and (entry.suffix == ".py" or is_notebook(entry)):
            raw_id, path, problem = entry.stem, entry, ""
        elif entry.is_dir():
            raw_id = entry.name
            path, problem = find_submission_file(entry, submission_file)
        else:
            continue
        submitters = metadata.get(entry.name, [])
        student = Student(
            id=student_id(raw_id),
            name="; ".join(p.get("name", "") for p in submitters if p.get("name")),
            email="; ".join(p.get("email", "") for p in submitters if p.get("email")),
            sid="; ".join(p.get("sid", "") for p in submitters if p.get("sid")),
        )
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path else ""
        submissions.append(Submission(student, path, str(entry.relative_to(root)), digest, problem))
    _check_ids(submissions, source)
    return sorted(submissions, key=lambda s: s.id)

def _check_ids(submissions: Sequence[Submission], source: Path) -> None:
    seen: dict[str, str] = {}
    for s in submissions:
        if not s.id or s.id.lower() in RESERVED:
            raise BatchError(f"{s.source} in {source}: {s.id!r} cannot be a student id "
                             "(it names a batch file)")
        if s.id in seen:
            raise BatchError(f"{seen[s.id]} and {s.source} in {source} both give student id {s.id!r}")
        seen[s.id] = s.source
    if not submissions:
        raise BatchError(f"no submissions in {source} (expected .py files or one folder per student)")
