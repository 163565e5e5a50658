"""grader/publishing/people.py: a student named as the roster names them once matched (a group: each member), what
the roster leaves empty kept from what was known (Gradescope's metadata), one line for a listing."""

from __future__ import annotations

from grader.publishing.people import RosterStudent, Student

ADA = RosterStudent("Lovelace, Ada", "1001", "S-100", "ada@uni.edu", "Sec 1", "file name = SIS Login ID")


def test_a_matched_student_takes_the_roster_identity() -> None:
    known = Student("submission_7", name="Ada L.", email="ada.l@gmail.com", sid="gs-42")
    assert known.with_roster((ADA,)) == Student("submission_7", "Lovelace, Ada", "ada@uni.edu", "S-100", "Sec 1")
    assert known.with_roster(()) is known  # no match: as the submission says
    assert known.with_roster((ADA,)).known_as == "Lovelace, Ada · S-100 · Sec 1"
    assert Student("x").known_as == ""


def test_a_group_lists_each_member_and_its_section_once() -> None:
    pair = (RosterStudent("One, Pair", "1002", "S-200", "one@uni.edu", "Sec 2"),
            RosterStudent("Two, Pair", "1003", "S-201", "TWO", "Sec 2"))
    grouped = Student("submission_9").with_roster(pair)
    assert (grouped.name, grouped.email, grouped.sid, grouped.section) == (
        "One, Pair; Two, Pair", "one@uni.edu", "S-200; S-201", "Sec 2")  # a login that is not an email: no email


def test_a_map_roster_names_nobody() -> None:
    """`alice,100234`: the roster knows alice as SIS User ID 100234, not by name; what was known stays."""
    mapped = RosterStudent(name="100234", sis_user_id="100234")
    assert mapped.person_name == "" and ADA.person_name == "Lovelace, Ada"
    assert Student("alice", name="Alice A.").with_roster((mapped,)) == Student("alice", "Alice A.", "", "100234", "")
