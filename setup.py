"""Build step only (all metadata is in pyproject.toml): ship the checkout's example assignments inside the
package, so an installed grader has assignments to list, check and grade. The wheel is public (students
install it), so what ships is named, never filtered:

    grader/examples/assignments/<id>/assignment.toml   the public form of the spec (public cases only, no
                                                       reference): grader/authoring/public.py writes it
    grader/examples/assignments/<id>/<module>          the oracle module the spec names
    grader/examples/student_template/<id>/...          student_template/<id>/: what a student starts from

Nothing of reference/ is named, so none of it ships. grader/authoring/public.py is loaded by file path:
setuptools' isolated build environment has neither torch nor the grader installed.
tests/e2e/test_package.py builds the wheel and looks inside.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
EXAMPLES = Path("grader") / "examples"


def public_module() -> ModuleType:
    path = HERE / "grader" / "authoring" / "public.py"
    spec = importlib.util.spec_from_file_location("_grader_public_form", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and typing look modules up by name
    spec.loader.exec_module(module)
    return module


def example_files(course: Path) -> list[tuple[Path, bytes]]:
    """(path under grader/examples, bytes) of every shipped file, for every assignment of the course."""
    public = public_module()
    library = course / public.COURSE_TRAPS  # the course's trap library: written into each public form
    library_text = library.read_text(encoding="utf-8") if library.is_file() else None
    found = []
    for spec in sorted((course / "assignments").glob("*/assignment.toml")):
        text = spec.read_text(encoding="utf-8")
        module = public.tomllib.loads(text)["assignment"]["module"]
        public_form = public.public_toml(text, library_text)
        found.append((Path("assignments") / spec.parent.name / spec.name, public_form.encode()))
        found.append((Path("assignments") / spec.parent.name / module, (spec.parent / module).read_bytes()))
        template = course / "student_template" / spec.parent.name
        for path in sorted(template.rglob("*")) if template.is_dir() else ():
            if path.is_file() and "__pycache__" not in path.parts:
                found.append((Path("student_template") / path.relative_to(course / "student_template"),
                              path.read_bytes()))
    return found


class BuildPyWithExamples(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install reads the checkout's folders
            return
        for rel, data in example_files(HERE):
            target = Path(self.build_lib) / EXAMPLES / rel
            self.mkpath(str(target.parent))
            target.write_bytes(data)


setup(cmdclass={"build_py": BuildPyWithExamples})
