"""Rubrics and episode verdicts as plain data: a rubric's criteria checked, one
annotator's marks scored, and the answers an episode verdict takes. Django-free, so the
services, the exports and a notebook share one implementation.

A rubric is a list of criteria, each ``{"text", "weight", "condition"}``: the criterion,
how much it counts (a positive number, 1 when left out) and, optionally, when it applies
("if the task asks for code"). An annotator marks each criterion ``met``, ``not_met`` or
``na`` (not applicable) for a trajectory and links the steps that are its evidence. The
score is the weighted share met among the criteria marked met or not met: not applicable
and unmarked criteria count neither way; with none marked so, there is no score.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

MET = "met"
NOT_MET = "not_met"
NOT_APPLICABLE = "na"
MARKS = (MET, NOT_MET, NOT_APPLICABLE)
MARK_NAMES = {MET: "met", NOT_MET: "not met", NOT_APPLICABLE: "n/a"}

MAX_CRITERIA = 100
MAX_CRITERION_CHARS = 2_000
MAX_WEIGHT = 1_000.0
CRITERION_FIELDS = ("text", "weight", "condition")

# The outcome an episode verdict answers with.
OUTCOMES = ("success", "partial", "failure", "unsure")
MAX_CRITIQUE_CHARS = 20_000
MAX_EVIDENCE_STEPS = 200


class RubricInvalid(ValueError):
    """A rubric's criteria refused, with the criterion and field it is about in the
    message (``criteria.2.weight: ...``)."""


def criteria_clean(raw: Any) -> list[dict[str, Any]]:
    """The criteria as stored (text stripped, weight a float, condition a string), or
    :class:`RubricInvalid` naming the first problem: a list of 1 to ``MAX_CRITERIA``
    objects with a non-empty ``text``, a positive ``weight`` and no other keys."""
    if not isinstance(raw, list) or not raw:
        raise RubricInvalid("criteria: a rubric is a non-empty list of criteria")
    if len(raw) > MAX_CRITERIA:
        raise RubricInvalid(f"criteria: at most {MAX_CRITERIA} criteria (got {len(raw)})")
    cleaned = []
    for position, entry in enumerate(raw):
        where = f"criteria.{position}"
        if not isinstance(entry, Mapping):
            raise RubricInvalid(f"{where}: a criterion is an object with text and weight")
        unknown = sorted(set(entry) - set(CRITERION_FIELDS))
        if unknown:
            fields = ", ".join(CRITERION_FIELDS)
            raise RubricInvalid(f"{where}: unknown field {', '.join(unknown)} (fields: {fields})")
        text = entry.get("text")
        if not isinstance(text, str) or not text.strip():
            raise RubricInvalid(f"{where}.text: a criterion needs its text")
        if len(text) > MAX_CRITERION_CHARS:
            raise RubricInvalid(f"{where}.text: at most {MAX_CRITERION_CHARS} characters")
        weight = entry.get("weight", 1)
        if weight is None or weight == "":
            weight = 1
        try:
            weight = float(weight)
        except (TypeError, ValueError):
            raise RubricInvalid(f"{where}.weight: {weight!r} is not a number") from None
        if isinstance(entry.get("weight"), bool) or not 0 < weight <= MAX_WEIGHT:
            raise RubricInvalid(f"{where}.weight: a number above 0 and at most {MAX_WEIGHT:g}")
        condition = entry.get("condition") or ""
        if not isinstance(condition, str):
            raise RubricInvalid(f"{where}.condition: a sentence, or left out")
        if len(condition) > MAX_CRITERION_CHARS:
            raise RubricInvalid(f"{where}.condition: at most {MAX_CRITERION_CHARS} characters")
        cleaned.append({"text": text.strip(), "weight": weight, "condition": condition.strip()})
    return cleaned


def rubric_score(criteria: list[dict[str, Any]], marks: Mapping[int, str]) -> float | None:
    """The weighted share of criteria met among those marked met or not met (by
    criterion position); None when none is."""
    met = counted = 0.0
    for position, criterion in enumerate(criteria):
        mark = marks.get(position)
        if mark not in (MET, NOT_MET):
            continue
        weight = float(criterion.get("weight", 1))
        counted += weight
        if mark == MET:
            met += weight
    return met / counted if counted else None


def next_mark(mark: str) -> str:
    """The mark a keypress moves to: unmarked, then met, not met, n/a, and round again."""
    if mark not in MARKS:
        return MET
    return MARKS[(MARKS.index(mark) + 1) % len(MARKS)]


def evidence_clean(raw: Iterable[Any], step_count: int) -> list[int]:
    """Evidence step indexes, sorted and unique; ValueError naming the first index that
    is no step of the trajectory."""
    steps = set()
    for item in raw:
        if isinstance(item, bool) or not isinstance(item, int):
            raise ValueError(f"evidence: {item!r} is not a step index")
        if not 0 <= item < step_count:
            raise ValueError(
                f"evidence: step {item} is not in this trajectory (its steps are 0 to"
                f" {step_count - 1})"
            )
        steps.add(item)
    if len(steps) > MAX_EVIDENCE_STEPS:
        raise ValueError(f"evidence: at most {MAX_EVIDENCE_STEPS} steps")
    return sorted(steps)
