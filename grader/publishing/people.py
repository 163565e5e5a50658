"""Who a line of a class's files is about: a submission's `Student` (the batch's id and what is known of them) and
a `RosterStudent` of the course's roster (grader.operations.batch.roster). `Student.with_roster` gives a student
the roster's identity once the batch has matched them, so the gradebook, the class report and the similarity
report name students as Canvas does."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class RosterStudent:
    """A student of the course's roster (Canvas's gradebook export, or a two-column map): who canvas.csv names,
    in the columns Canvas matches students on."""

    name: str
    canvas_id: str = ""  # Canvas's `ID`
    sis_user_id: str = ""
    sis_login_id: str = ""
    section: str = ""
    matched_by: str = ""  # how a submission was matched to this student ("file name = SIS Login ID", ...)

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "id": self.canvas_id, "sis_user_id": self.sis_user_id,
                "sis_login_id": self.sis_login_id, "section": self.section, "matched_by": self.matched_by}

    @property
    def person_name(self) -> str:
        """The student's name, or "" when the roster knows only an id (a map's `alice,100234` names 100234)."""
        return "" if self.name in (self.canvas_id, self.sis_user_id, self.sis_login_id) else self.name


@dataclass(frozen=True)
class Student:
    """Who a submission belongs to: the id (a folder name in the batch output) and, when known, their names,
    emails, student ids and sections ("; "-joined for a group): from Gradescope's export metadata, or from the
    roster once matched (`with_roster`)."""

    id: str
    name: str = ""
    email: str = ""
    sid: str = ""
    section: str = ""

    def with_roster(self, roster: Sequence[RosterStudent]) -> Student:
        """As the roster names them (a group: each member, in order): name, SIS User ID as `sid`, section, and the
        SIS Login ID as `email` when it is an email. What the roster leaves empty stays as it was."""
        if not roster:
            return self
        return replace(
            self,
            name=_joined(r.person_name for r in roster) or self.name,
            email=_joined(r.sis_login_id for r in roster if "@" in r.sis_login_id) or self.email,
            sid=_joined(r.sis_user_id for r in roster) or self.sid,
            section=_joined(dict.fromkeys(r.section for r in roster)) or self.section,  # a group's: once
        )

    @property
    def known_as(self) -> str:
        """Name, SIS id and section as one line for a listing (`Lovelace, Ada · S-100 · Sec 1`); "" if unknown."""
        return " · ".join(part for part in (self.name, self.sid, self.section) if part)


def _joined(values: Iterable[str]) -> str:
    return "; ".join(v for v in values if v)
