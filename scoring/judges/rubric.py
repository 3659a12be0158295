"""The judge's rubric mode: one request per trajectory, showing every step numbered by its
index and the rubric's criteria numbered from 0, and the strict reading of its answer.

The answer is the last JSON object of the reply (a fenced ```json block where there is
one): ``{"criteria": [{"criterion": 0, "mark": "met", "evidence": [2, 5]}, ...]}``, each
criterion of the rubric named exactly once, ``mark`` one of ``met``, ``not_met``, ``na``,
``evidence`` step indexes of the trajectory (may be empty or left out), ``reason``
optional. Anything else (no JSON, a criterion missing, twice or unknown, a mark not one of
the three, a step the trajectory lacks, an unknown key) makes the whole reply unreadable:
its error names the first problem, the run counts it, and no mark is written from it. A
mark is never guessed.

Django-free (plain data in and out), like the other modes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scoring.judges.modes import JudgeRequest, Log, Prompt, log_lines

MARKS = ("met", "not_met", "na")
ENTRY_KEYS = ("criterion", "mark", "evidence", "reason")
_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class CriterionMark:
    criterion: int
    mark: str
    evidence: tuple[int, ...]


@dataclass(frozen=True)
class RubricAnswer:
    """What a reply says: a mark per criterion (in criterion order), the critique (the
    reply before the JSON), or ``error``: why it could not be read (then no marks)."""

    marks: tuple[CriterionMark, ...]
    critique: str
    error: str = ""

    @property
    def parsed(self) -> bool:
        return not self.error


def criteria_lines(criteria: Sequence[Mapping[str, Any]]) -> str:
    lines = []
    for number, criterion in enumerate(criteria):
        weight = float(criterion.get("weight", 1))
        line = f"Criterion {number} (weight {weight:g}): {criterion['text']}"
        if criterion.get("condition"):
            line += f" (applies only {criterion['condition']})"
        lines.append(line)
    return "\n".join(lines)


def rubric_request(prompt: Prompt, log: Log, criteria: Sequence[Mapping[str, Any]]) -> JudgeRequest:
    """The one request for ``log`` (key ``t<trajectory id>``)."""
    values = {
        "task": log.task,
        "steps": log_lines(log),
        "step_count": str(len(log.steps)),
        "criteria": criteria_lines(criteria),
        "criterion_count": str(len(criteria)),
    }
    user = {"role": "user", "content": prompt.template.format(**values)}
    messages: tuple[dict[str, str], ...] = (user,)
    if prompt.system:
        messages = ({"role": "system", "content": prompt.system.format(**values)}, user)
    return JudgeRequest(
        key=f"t{log.key}", trajectory=log.key, step=None, messages=messages, log=log
    )


def _json_part(text: str) -> tuple[str, int] | None:
    """The reply's JSON text and where it starts: the last fenced block, else from the
    first ``{`` of the last top-level object to the reply's last ``}``."""
    fences = list(_FENCE.finditer(text))
    if fences:
        return fences[-1].group(1), fences[-1].start()
    end = text.rfind("}")
    if end < 0:
        return None
    # The last object: walk back from its closing brace to the brace that opens it.
    depth = 0
    for position in range(end, -1, -1):
        if text[position] == "}":
            depth += 1
        elif text[position] == "{":
            depth -= 1
            if depth == 0:
                return text[position : end + 1], position
    return None


def rubric_read(text: str, *, criterion_count: int, step_indexes: Sequence[int]) -> RubricAnswer:
    """The marks a reply gives, read strictly (see the module's docstring)."""
    found = _json_part(text)
    if found is None:
        return RubricAnswer((), text.strip(), error="no JSON object in the reply")
    raw, start = found
    critique = text[:start].strip() or text.strip()

    def refused(error: str) -> RubricAnswer:
        return RubricAnswer((), critique, error=error)

    try:
        answer = json.loads(raw)
    except json.JSONDecodeError as error:
        return refused(f"the JSON does not parse: {error.msg} at character {error.pos}")
    if not isinstance(answer, dict) or not isinstance(answer.get("criteria"), list):
        return refused('the JSON is not an object with a "criteria" list')
    known_steps = set(step_indexes)
    marks: dict[int, CriterionMark] = {}
    for position, entry in enumerate(answer["criteria"]):
        where = f"criteria.{position}"
        if not isinstance(entry, dict):
            return refused(f"{where}: not an object")
        unknown = sorted(set(entry) - set(ENTRY_KEYS))
        if unknown:
            return refused(f"{where}: unknown key {', '.join(unknown)}")
        number = entry.get("criterion")
        if isinstance(number, bool) or not isinstance(number, int):
            return refused(f"{where}.criterion: {number!r} is not a criterion number")
        if not 0 <= number < criterion_count:
            return refused(
                f"{where}.criterion: {number} is not one of the rubric's criteria (0 to"
                f" {criterion_count - 1})"
            )
        if number in marks:
            return refused(f"{where}.criterion: criterion {number} is named twice")
        mark = entry.get("mark")
        if mark not in MARKS:
            return refused(f"{where}.mark: {mark!r} is not one of {', '.join(MARKS)}")
        evidence = entry.get("evidence", [])
        if not isinstance(evidence, list):
            return refused(f"{where}.evidence: not a list of step numbers")
        for step in evidence:
            if isinstance(step, bool) or not isinstance(step, int) or step not in known_steps:
                return refused(f"{where}.evidence: {step!r} is not a step of the trajectory")
        marks[number] = CriterionMark(number, mark, tuple(sorted(set(evidence))))
    missing = [n for n in range(criterion_count) if n not in marks]
    if missing:
        return refused(f"criteria: no answer for criterion {', '.join(map(str, missing))}")
    return RubricAnswer(tuple(marks[n] for n in range(criterion_count)), critique)
