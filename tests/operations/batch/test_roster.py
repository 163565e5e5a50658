"""grader/operations/batch/roster.py: a Canvas gradebook export (as Canvas writes it: a BOM, the Points Possible
row, quoted names with commas, columns in any order, more columns) and a two-column map, read and matched to a
class's submissions by file name, Gradescope email or student id; conflicts and strays named."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.operations.batch.folder import BatchError
from grader.operations.batch.roster import RosterAssignment, match_roster, missing_id, parse_roster, read_roster
from grader.operations.batch.submissions import Submission
from grader.publishing.gradebook import Student

CANVAS_EXPORT = (
    "\ufeffStudent,ID,SIS User ID,SIS Login ID,Integration ID,Section,Fused layers (12345),Current Score\r\n"
    "    Points Possible,,,,,,40.00,(read only)\r\n"
    ",,,,,,Manual Posting,\r\n"
    '"Lovelace, Ada",1001,S-100,ada@uni.edu,,"Sec 1, Tuesday",,90\r\n'
    '"Hopper, Grace",1002,S-200,GHOPPER,,Sec 2,12.5,88\r\n'
    '"Turing, Alan",1003,S-300,aturing@uni.edu,,Sec 2,,70\r\n'
    '"Noether, Emmy",1004,S-400,enoether@uni.edu,,Sec 1,,75\r\n'
    '"Student, Test",9999,,,,Sec 1,,\r\n'
)


def sub(stem: str, email: str = "", sid: str = "", folder: bool = False) -> Submission:
    path = Path(f"/class/{stem}/fused_layers.py") if folder else Path(f"/class/{stem}.py")
    return Submission(Student(stem, email=email, sid=sid), path, stem if folder else f"{stem}.py", "0" * 64)


def test_a_canvas_export_is_read_as_canvas_writes_it() -> None:
    roster = parse_roster(CANVAS_EXPORT, "export.csv")
    assert roster.kind == "canvas"
    assert [s.name for s in roster.students] == ["Lovelace, Ada", "Hopper, Grace", "Turing, Alan", "Noether, Emmy"]
    ada = roster.students[0]
    assert (ada.canvas_id, ada.sis_user_id, ada.sis_login_id, ada.section) == ("1001", "S-100", "ada@uni.edu",
                                                                             "Sec 1, Tuesday")


def test_a_canvas_exports_assignment_columns_and_their_points_possible() -> None:
    """One assignment column (`Name (id)`; Canvas's totals are not assignments): canvas.csv's default column, and
    one line when its Points Possible is not the grade's maximum (matched by the assignment id)."""
    roster = parse_roster(CANVAS_EXPORT, "export.csv")
    assert roster.assignments == (RosterAssignment("Fused layers (12345)", 40.0),)
    assert roster.assignment_column == "Fused layers (12345)"
    assert roster.points_warning("Fused layers (12345)", 40.0) is None
    assert roster.points_warning("Renamed in Canvas (12345)", 27.0) == (
        "warning: the roster export.csv says Fused layers (12345) has 40 points possible, but this assignment's "
        "grades are out of 27: set its points in Canvas to 27 before importing canvas.csv")
    assert roster.points_warning("Another (999)", 27.0) is None  # not in the export: nothing to compare
    two = parse_roster(CANVAS_EXPORT.replace(",Current Score", ",Softmax (777)"), "export.csv")
    assert [a.column for a in two.assignments] == ["Fused layers (12345)", "Softmax (777)"]
    assert two.assignments[1].points_possible is None  # "(read only)"
    assert two.assignment_column is None  # two: which one is this batch's is not the roster's to say
    assert parse_roster("stem,student\nann,S-1\n").assignment_column is None  # a map has no assignments


def test_read_roster_takes_a_bom_and_windows_1252(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_bytes(CANVAS_EXPORT.encode("utf-8"))
    assert len(read_roster(path).students) == 4
    path.write_bytes('Student,ID,SIS User ID,SIS Login ID,Section\n"Gödel, Kurt",7,S-7,kgodel,\n'.encode("cp1252"))
    assert read_roster(path).students[0].name == "Gödel, Kurt"
    with pytest.raises(BatchError, match="cannot read the roster"):
        read_roster(tmp_path / "nowhere.csv")


def test_submissions_match_by_file_name_email_or_student_id() -> None:
    roster = parse_roster(CANVAS_EXPORT)
    match = match_roster(roster, [
        sub("ADA@uni.edu"),  # file stem = SIS Login ID, case ignored
        sub("ghopper", folder=True),  # folder name = SIS Login ID
        sub("submission_7", email="aturing@uni.edu"),  # Gradescope export: email = SIS Login ID
        sub("submission_8", sid="S-400"),  # Gradescope student id = SIS User ID
        sub("zed"),  # nobody
    ])
    found = {k: [(s.name, s.matched_by) for s in v] for k, v in match.by_submission.items()}
    assert found == {"ADA@uni.edu": [("Lovelace, Ada", "file name = SIS Login ID")],
                     "ghopper": [("Hopper, Grace", "file name = SIS Login ID")],
                     "submission_7": [("Turing, Alan", "email = SIS Login ID")],
                     "submission_8": [("Noether, Emmy", "Gradescope student id = SIS User ID")]}
    assert match.unmatched == ("zed",) and match.missing == () and match.conflicts == ()
    by_ids = match_roster(roster, [sub("S-100"), sub("1002")])  # SIS User ID, Canvas ID
    assert {k: v[0].name for k, v in by_ids.by_submission.items()} == {"S-100": "Lovelace, Ada",
                                                                      "1002": "Hopper, Grace"}
    assert [s.name for s in by_ids.missing] == ["Turing, Alan", "Noether, Emmy"]


def test_a_group_submission_belongs_to_each_member_and_clashes_are_named() -> None:
    roster = parse_roster(CANVAS_EXPORT)
    group = sub("submission_9", email="aturing@uni.edu; enoether@uni.edu", sid="S-300; S-400")
    match = match_roster(roster, [group])
    assert [s.name for s in match.by_submission["submission_9"]] == ["Turing, Alan", "Noether, Emmy"]
    twice = match_roster(roster, [sub("ada@uni.edu"), sub("submission_3", email="ada@uni.edu")])
    assert "ada@uni.edu" not in twice.by_submission and "submission_3" not in twice.by_submission
    (conflict,) = twice.conflicts
    assert "`ada@uni.edu` and `submission_3` both match roster student Lovelace, Ada" in conflict
    assert twice.unmatched == ()  # both are named in the conflict instead
    assert "Lovelace, Ada" not in [s.name for s in twice.missing]  # she submitted: not missing, but no score written
    ambiguous = parse_roster("Student,ID,SIS User ID,SIS Login ID,Section\nA,1,x,y,\nB,2,z,x,\n")
    clash = match_roster(ambiguous, [sub("x")])
    assert clash.by_submission == {} and "`x`: its name matches 2 roster students" in clash.conflicts[0]


def test_a_two_column_map_with_or_without_a_header() -> None:
    plain = parse_roster("alice,S-100\nbob@uni.edu,S-200\nBOBBY,S-200\n")
    assert plain.kind == "map" and [s.sis_user_id for s in plain.students] == ["S-100", "S-200"]
    match = match_roster(plain, [sub("Alice"), sub("submission_2", email="bob@uni.edu"), sub("carol")])
    assert {k: v[0].sis_user_id for k, v in match.by_submission.items()} == {"Alice": "S-100",
                                                                            "submission_2": "S-200"}
    assert match.unmatched == ("carol",)
    logins = parse_roster("file,SIS Login ID\nalice,alice@uni.edu\n")
    assert logins.students[0].sis_login_id == "alice@uni.edu" and logins.students[0].sis_user_id == ""


@pytest.mark.parametrize(("text", "words"), [
    ("", "is empty"),
    ("alice,S-1,extra\n", "line 1 has 3 values"),
    ("alice,S-1\nalice,S-2\n", "maps 'alice' twice"),
    ("Student,ID,SIS User ID,SIS Login ID,Section\n    Points Possible,,,,\n", "lists no students"),
])
def test_a_roster_the_grader_cannot_use_says_why(text: str, words: str) -> None:
    with pytest.raises(BatchError, match=words):
        parse_roster(text, "roster.csv")


def test_missing_students_get_ids_of_their_own() -> None:
    roster = parse_roster(CANVAS_EXPORT)
    ada = roster.students[0]
    assert missing_id(ada, set()) == "ada@uni.edu"
    assert missing_id(ada, {"ADA@uni.edu"}) == "ada@uni.edu-missing"
    assert missing_id(roster.students[1], set()) == "GHOPPER"
