"""Build step only (all metadata is in pyproject.toml): ship the checkout's example assignments inside the
package, as grader/examples/assignments/<id>/, so an installed grader has assignments to list, check and grade.

Left out, as in the Gradescope bundle: each assignment's reference solution and mutant corpus (the wheel is
public; students install it). The template stays: it is what a student starts from. The names mirror
grader.authoring.spec (REFERENCE_FILE, MUTANTS_FILE, MUTANTS_DIR, VARIANTS_DIR); tests/test_package.py checks
that they still do.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
EXAMPLES = Path("grader") / "examples" / "assignments"
NOT_SHIPPED = ("reference.py", "mutants.toml", "mutants", "variants")


def example_files(assignments: Path) -> list[tuple[Path, Path]]:
    """(source, path relative to the examples folder) for every shipped file of every assignment folder."""
    found = []
    for spec in sorted(assignments.glob("*/assignment.toml")):
        folder = spec.parent
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder)
            if (path.is_file() and rel.parts[0] not in NOT_SHIPPED and "__pycache__" not in rel.parts
                    and path.suffix not in (".pyc", ".pyo")):
                found.append((path, Path(folder.name) / rel))
    return found


class BuildPyWithExamples(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install reads the checkout's assignments/
            return
        for source, rel in example_files(HERE / "assignments"):
            target = Path(self.build_lib) / EXAMPLES / rel
            self.mkpath(str(target.parent))
            self.copy_file(str(source), str(target))


setup(cmdclass={"build_py": BuildPyWithExamples})
