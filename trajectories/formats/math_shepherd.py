"""Math-Shepherd (Wang et al., 2024): math solutions whose steps were labeled
automatically by whether completions from them reach the right answer.

Each record is ``{"input", "label", "task"?}``. ``input`` is the problem followed by the
solution, every step ending in the tag ``ки``; ``label`` is the same text with each tag
replaced by ``+`` (good) or ``-`` (bad)::

    {"input": "Janet has 3 apples ... Step 1: 3 + 2 = 5. ки\\nStep 2: The answer is 5 ки",
     "label": "Janet has 3 apples ... Step 1: 3 + 2 = 5. +\\nStep 2: The answer is 5 +",
     "task": "GSM8K"}

The problem is the text before ``Step 1:``, or the first line when there is no
``Step 1:``. Steps keep their text as written, ``Step N:`` prefix included. The tags are
read by walking ``label`` along ``input``, so ``+`` and ``-`` inside the maths are never
mistaken for tags.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trajectories.formats import jsonstream, register
from trajectories.formats.base import (
    FieldError,
    ParsedLabel,
    ParsedStep,
    ParsedTrajectory,
    ParseResult,
    require,
)

ANNOTATOR = "import:math-shepherd"
STEP_TAG = "ки"
TAG_VALUES = {"+": 1, "-": -1}
FIRST_STEP = "Step 1:"


@register("math-shepherd", label="Math-Shepherd")
def parse(path: Path) -> Iterator[ParseResult]:
    yield from jsonstream.records_built(path, _trajectory)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _trajectory(record: Any, location: str) -> ParsedTrajectory:
    if not isinstance(record, dict):
        raise FieldError("", f"expected an object, got {type(record).__name__}")
    text = require(record, "input", str)
    label = require(record, "label", str)
    pieces = text.split(STEP_TAG)
    if len(pieces) < 2:
        raise FieldError("input", f"has no {STEP_TAG} step tag")
    if pieces[-1].strip():
        raise FieldError("input", f"has text after the last {STEP_TAG} step tag")
    problem, first_step = _split_problem(pieces[0])
    step_texts = [first_step, *(piece.strip() for piece in pieces[1:-1])]
    for index, content in enumerate(step_texts):
        if not content:
            raise FieldError("input", f"step {index} is empty")
    values = _tag_values(pieces, label)

    first_error = next((index for index, value in enumerate(values) if value < 0), -1)
    return ParsedTrajectory(
        # Records carry no id; the text identifies one, so re-imports match.
        external_id="ms-" + _digest(text),
        task=problem,
        steps=[
            ParsedStep(kind="thought", role="assistant", content=content, labelable=True)
            for content in step_texts
        ],
        task_key="ms-" + _digest(problem),
        first_error_index=first_error,
        metadata={key: value for key, value in record.items() if key not in ("input", "label")},
        labels=[
            ParsedLabel(step_index=index, value=value, annotator=ANNOTATOR)
            for index, value in enumerate(values)
        ],
        raw=record,
        location=location,
    )


def _split_problem(head: str) -> tuple[str, str]:
    """The problem and the first step's text, from the text before the first tag."""
    start = head.find(FIRST_STEP)
    if start == -1:
        problem, newline, step = head.strip().partition("\n")
        if not newline:
            raise FieldError(
                "input",
                f"has no {FIRST_STEP!r} and no line break to tell the problem from the first step",
            )
    else:
        problem, step = head[:start], head[start:]
    if not problem.strip():
        raise FieldError("input", "has no problem text before the first step")
    return problem.strip(), step.strip()


def _tag_values(pieces: list[str], label: str) -> list[int]:
    """The +1/-1 value of each tag: ``label`` must be ``input`` with every tag replaced
    by ``+`` or ``-``."""
    values = []
    position = 0
    for index, piece in enumerate(pieces[:-1]):
        if not label.startswith(piece, position):
            raise FieldError("label", f"does not match input before step {index}'s tag")
        position += len(piece)
        tag = label[position : position + 1]
        if tag not in TAG_VALUES:
            raise FieldError(
                "label", f"has {tag!r} where step {index}'s tag is; expected '+' or '-'"
            )
        values.append(TAG_VALUES[tag])
        position += 1
    if label[position:].strip():
        raise FieldError("label", "has text after the last tag")
    return values
