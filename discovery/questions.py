"""Questions in plain language, answered with the project's own tools: a judge turns the
question into a selection in the list's language (shown to the user, who may edit it)
plus, where filters cannot say it, a criterion in words; then the judge reads each
candidate trajectory of that selection and says whether it answers the question, at
which step, and why in one line. The answer is always trajectories and steps with their
reasons, never a bare number.

Here: the prompts and the strict reading of the judge's replies. A reply that is not what
was asked is unreadable (counted and shown), never guessed at."""

# Django-free: plain text in, plain data out.
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from trajectories.selection import FILTERS, FilterSpec

# Longest reason kept from a judge's reply; one line of the answer list.
REASON_CHARS = 300
# The most text of one trajectory shown to the judge: steps past it are cut in the middle
# (the start, which states the task, and the end, where failures show, are kept).
TRAJECTORY_CHARS = 12_000
STEP_CHARS = 1_200
# Filters a judge may propose: the ones that read the trajectory and its steps. Label,
# score and vector filters name ids and sources the judge cannot know.
PROPOSABLE_GROUPS = ("trajectory", "steps")
NOT_PROPOSABLE = ("similar_step",)

FILTER_SYSTEM = (
    "You translate a researcher's question about a collection of LLM-agent trajectories"
    " into filters of a fixed query language. Answer with one JSON object only."
)
FILTER_TEMPLATE = """The filters (name: meaning; allowed values where fixed):
{filters}

Question: {question}

Answer with a JSON object {{"filters": {{name: value, ...}}, "criterion": "..."}}.
Use only the filter names above; leave out a filter the question does not need.
"criterion" is what a reader must still check in each trajectory that the filters cannot
express, in one sentence, or "" if the filters say it all."""

CANDIDATE_SYSTEM = (
    "You read one LLM-agent trajectory and decide whether it matches a question."
    " Answer with one JSON object only."
)
CANDIDATE_TEMPLATE = """Question: {question}
{criterion}
Task: {task}

Steps:
{steps}

Answer with a JSON object {{"match": true or false, "step": the number of the step that
shows it (or null), "reason": one short sentence}}."""


class ReplyUnreadable(ValueError):
    """A judge's reply that is not the JSON object asked for."""


@dataclass(frozen=True)
class Proposal:
    """A judge's reading of a question: the filters it proposed (as given) and the
    criterion left for the per-trajectory pass."""

    filters: dict[str, Any]
    criterion: str


@dataclass(frozen=True)
class Verdict:
    matched: bool
    step: int | None
    reason: str


@dataclass(frozen=True)
class ShownStep:
    index: int
    kind: str
    agent: str
    text: str


def proposable_filters() -> list[FilterSpec]:
    return [
        spec
        for spec in FILTERS.values()
        if spec.group in PROPOSABLE_GROUPS and spec.name not in NOT_PROPOSABLE
    ]


def filter_messages(question: str) -> tuple[dict[str, str], ...]:
    lines = []
    for spec in proposable_filters():
        allowed = f" [{', '.join(spec.choices)}]" if spec.choices else ""
        lines.append(f"- {spec.name}: {spec.help}{allowed}")
    prompt = FILTER_TEMPLATE.format(filters="\n".join(lines), question=question.strip())
    return (
        {"role": "system", "content": FILTER_SYSTEM},
        {"role": "user", "content": prompt},
    )


def _json_object(text: str) -> dict[str, Any]:
    """The one JSON object in a reply (a code fence around it is allowed)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ReplyUnreadable("no JSON object in the reply")
    try:
        # strict=False: a line break inside a string, as models write them, is taken.
        value = json.loads(text[start : end + 1], strict=False)
    except json.JSONDecodeError as error:
        raise ReplyUnreadable(f"the reply's JSON does not parse: {error.msg}") from error
    if not isinstance(value, dict):
        raise ReplyUnreadable("the reply's JSON is not an object")
    return value


def proposal_parse(text: str) -> Proposal:
    value = _json_object(text)
    filters = value.get("filters", {})
    criterion = value.get("criterion", "")
    if not isinstance(filters, dict):
        raise ReplyUnreadable('"filters" is not an object')
    if not isinstance(criterion, str):
        raise ReplyUnreadable('"criterion" is not text')
    kept = {
        str(name): raw
        for name, raw in filters.items()
        if raw is not None and raw != "" and isinstance(raw, (str, int, float))
    }
    return Proposal(filters=kept, criterion=_one_line(criterion))


def _one_line(text: str) -> str:
    line = re.sub(r"\s+", " ", text).strip()
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 1] + "…"


def shown_steps(steps: Iterable[ShownStep]) -> str:
    """The steps as the judge reads them, numbered by index, each cut at ``STEP_CHARS``
    and the whole at ``TRAJECTORY_CHARS`` (a marker says how many steps were left out)."""
    lines = [
        f"[{step.index}] {step.kind}{f' ({step.agent})' if step.agent else ''}: "
        + (step.text if len(step.text) <= STEP_CHARS else step.text[:STEP_CHARS] + " …[cut]")
        for step in steps
    ]
    if sum(len(line) + 1 for line in lines) <= TRAJECTORY_CHARS:
        return "\n".join(lines)
    head: list[str] = []
    tail: list[str] = []
    budget = TRAJECTORY_CHARS // 2
    for line in lines:
        if sum(len(each) + 1 for each in head) + len(line) > budget:
            break
        head.append(line)
    for line in reversed(lines[len(head) :]):
        if sum(len(each) + 1 for each in tail) + len(line) > budget:
            break
        tail.insert(0, line)
    left_out = len(lines) - len(head) - len(tail)
    return "\n".join([*head, f"[… {left_out} steps left out …]", *tail])


def candidate_messages(
    question: str, criterion: str, task: str, steps: Iterable[ShownStep]
) -> tuple[dict[str, str], ...]:
    prompt = CANDIDATE_TEMPLATE.format(
        question=question.strip(),
        criterion=f"What to check: {criterion}" if criterion else "",
        task=task[:STEP_CHARS],
        steps=shown_steps(steps),
    )
    return (
        {"role": "system", "content": CANDIDATE_SYSTEM},
        {"role": "user", "content": prompt},
    )


def verdict_parse(text: str, indexes: Iterable[int]) -> Verdict:
    """A judge's verdict on one trajectory; its step must be one of ``indexes`` (the
    trajectory's step indexes) or null."""
    value = _json_object(text)
    matched = value.get("match")
    if not isinstance(matched, bool):
        raise ReplyUnreadable('"match" is not true or false')
    step = value.get("step")
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, int):
            raise ReplyUnreadable('"step" is not a step number')
        if step not in set(indexes):
            raise ReplyUnreadable(f'"step" {step} is not a step of the trajectory')
    reason = value.get("reason", "")
    if not isinstance(reason, str):
        raise ReplyUnreadable('"reason" is not text')
    return Verdict(matched=matched, step=step, reason=_one_line(reason))
