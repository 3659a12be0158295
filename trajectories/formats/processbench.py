"""ProcessBench (Qwen): a JSON array of math solutions with a human first-error index.

Each item is ``{id, generator, problem, steps: [str], final_answer_correct, label}``,
where ``label`` is the 0-based index of the earliest wrong step or -1 when every step is
correct. The index becomes step labels: +1 for each step before it, -1 for the step at
it, nothing after it (a step after the first error was never judged).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trajectories.formats import jsonstream, register
from trajectories.formats.base import (
    FieldError,
    FileError,
    ParsedLabel,
    ParsedStep,
    ParsedTrajectory,
    ParseResult,
    RecordError,
    require,
)

ANNOTATOR = "import:processbench"


@register("processbench", label="ProcessBench")
def parse(path: Path) -> Iterator[ParseResult]:
    first = jsonstream.first_byte(path)
    if first != b"[":
        raise FileError(f"{path}: expected a JSON array of ProcessBench items")
    for location, record in jsonstream.iter_array(path):
        try:
            yield _trajectory(record, location)
        except FieldError as error:
            yield RecordError(location, error.field, error.message)


def task_key(problem: str) -> str:
    """Groups solutions of the same problem: ProcessBench has several generators'
    attempts at one GSM8K question, each under its own id."""
    return "pb-" + hashlib.sha256(problem.encode()).hexdigest()[:16]


def _trajectory(record: Any, location: str) -> ParsedTrajectory:
    if not isinstance(record, dict):
        raise FieldError("", f"expected an object, got {type(record).__name__}")
    external_id = require(record, "id", (str, int))
    if str(external_id).strip() == "":
        raise FieldError("id", "is empty")
    problem = require(record, "problem", str)
    generator = require(record, "generator", str)
    raw_steps = require(record, "steps", list)
    if not raw_steps:
        raise FieldError("steps", "is empty; a solution needs at least one step")
    for index, step in enumerate(raw_steps):
        if not isinstance(step, str):
            raise FieldError(f"steps.{index}", f"expected str, got {type(step).__name__}")
    correct = require(record, "final_answer_correct", bool)
    first_error = require(record, "label", int)
    if not -1 <= first_error < len(raw_steps):
        raise FieldError(
            "label",
            f"is {first_error}; expected -1 (no error) or a step index "
            f"from 0 to {len(raw_steps) - 1}",
        )

    judged = len(raw_steps) if first_error == -1 else first_error + 1
    labels = [
        ParsedLabel(step_index=index, value=-1 if index == first_error else 1, annotator=ANNOTATOR)
        for index in range(judged)
    ]
    return ParsedTrajectory(
        external_id=str(external_id),
        task=problem,
        steps=[
            ParsedStep(kind="thought", role="assistant", content=step, labelable=True)
            for step in raw_steps
        ],
        task_key=task_key(problem),
        model_name=generator,
        outcome_reward=1.0 if correct else 0.0,
        success=correct,
        first_error_index=first_error,
        labels=labels,
        raw=record,
        location=location,
    )
