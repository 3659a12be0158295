"""PRM800K (OpenAI): math solutions rated step by step by human labelers, one JSON
object per line.

A record is one labeler's pass over one problem. ``label.steps[i]`` holds the model
completions offered at step *i*, each rated -1, 0 or +1 (or null, unrated); the one the
labeler chose to continue from (``chosen_completion``), or else the step the labeler
wrote (``human_completion``), is the solution's step *i*. A step with neither is where
the labeler stopped.

Every completion is kept. The chosen path is one trajectory whose steps carry their
ratings as imported labels. Each completion that was not chosen at step *i* becomes a
short trajectory of its own: the chosen steps 0 to *i-1*, then that completion, linked to
the main trajectory with ``branch_index = i``. Its rating labels its last step only, so
every rating is imported exactly once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trajectories.formats import jsonstream, register
from trajectories.formats.base import (
    FieldError,
    ParsedLabel,
    ParsedStep,
    ParsedTrajectory,
    ParseResult,
    RecordError,
    require,
)

ANNOTATOR = "import:prm800k"
RATINGS = (-1, 0, 1)
# Top-level keys copied into the trajectory metadata as they are.
RECORD_METADATA = (
    "labeler",
    "timestamp",
    "generation",
    "is_quality_control_question",
    "is_initial_screening_question",
)
# Question keys that are neither the problem nor the answer, and small enough to show.
# pre_generated_steps is left in the raw record: in phase 2 it repeats the rated steps.
QUESTION_METADATA = (
    "ground_truth_solution",
    "pre_generated_answer",
    "pre_generated_verifier_score",
)


@dataclass(frozen=True)
class _Completion:
    step: ParsedStep
    rating: int | None
    raw: Any


@register("prm800k", label="PRM800K")
def parse(path: Path) -> Iterator[ParseResult]:
    for entry in jsonstream.iter_records(path):
        if isinstance(entry, RecordError):
            yield entry
            continue
        location, record = entry
        try:
            # Built in full before any is yielded, so a bad record yields nothing but
            # its error.
            trajectories = _trajectories(record, location)
        except FieldError as error:
            yield RecordError(location, error.field, error.message)
            continue
        yield from trajectories


def task_key(problem: str) -> str:
    """Groups every labeler's pass over one problem."""
    return "prm-" + hashlib.sha256(problem.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _trajectories(record: Any, location: str) -> list[ParsedTrajectory]:
    if not isinstance(record, dict):
        raise FieldError("", f"expected an object, got {type(record).__name__}")
    labeler = require(record, "labeler", str)
    timestamp = require(record, "timestamp", str)
    question = require(record, "question", dict)
    problem = require(question, "problem", str, "question")
    ground_truth = _optional(question, "ground_truth_answer", str, "question") or ""
    label = require(record, "label", dict)
    raw_steps = require(label, "steps", list, "label")
    if not raw_steps:
        raise FieldError("label.steps", "is empty; the labeler rated no step")

    main_id = f"{labeler}:{timestamp}"
    metadata = {key: record[key] for key in RECORD_METADATA if key in record}
    metadata["finish_reason"] = _optional(label, "finish_reason", str, "label")
    metadata["total_time"] = _optional(label, "total_time", (int, float), "label")
    metadata.update({key: question[key] for key in QUESTION_METADATA if key in question})

    def trajectory(**fields: Any) -> ParsedTrajectory:
        return ParsedTrajectory(
            task=problem,
            task_key=task_key(problem),
            ground_truth=ground_truth,
            metadata=dict(metadata),
            location=location,
            **fields,
        )

    path: list[ParsedStep] = []
    path_labels: list[ParsedLabel] = []
    # (step index, completion index, completion) for every completion not on the path.
    alternatives: list[tuple[int, int, _Completion]] = []
    stopped_at: int | None = None
    for index, raw_step in enumerate(raw_steps):
        step_path = f"label.steps.{index}"
        if stopped_at is not None:
            raise FieldError(
                step_path,
                f"follows step {stopped_at}, which has neither a chosen nor a human completion",
            )
        if not isinstance(raw_step, dict):
            raise FieldError(step_path, f"expected an object, got {type(raw_step).__name__}")
        completions = [
            _completion(raw, f"{step_path}.completions.{number}", {"completion": number})
            for number, raw in enumerate(_optional(raw_step, "completions", list, step_path) or [])
        ]
        chosen = _optional(raw_step, "chosen_completion", int, step_path)
        if chosen is not None and not 0 <= chosen < len(completions):
            raise FieldError(
                f"{step_path}.chosen_completion",
                f"is {chosen}; the step has {len(completions)} completions",
            )
        raw_human = _optional(raw_step, "human_completion", dict, step_path)

        if chosen is not None:
            on_path: _Completion | None = completions[chosen]
        elif raw_human is not None:
            on_path = _completion(raw_human, f"{step_path}.human_completion", {"source": "human"})
        else:
            on_path = None
            stopped_at = index
        alternatives.extend(
            (index, number, completion)
            for number, completion in enumerate(completions)
            if number != chosen
        )
        if on_path is not None:
            if on_path.rating is not None:
                path_labels.append(_label(index, on_path.rating))
            path.append(on_path.step)

    results = []
    if path:
        results.append(trajectory(external_id=main_id, steps=path, labels=path_labels, raw=record))
    for index, number, completion in alternatives:
        labels = [] if completion.rating is None else [_label(index, completion.rating)]
        # With nothing chosen at the first step there is no main trajectory to link to.
        parent = main_id if path else ""
        results.append(
            trajectory(
                external_id=f"{main_id}:{index}:{number}",
                steps=[*path[:index], completion.step],
                labels=labels,
                raw=completion.raw,
                parent_external_id=parent,
                branch_index=index if parent else None,
            )
        )
    return results


def _completion(raw: Any, path: str, origin: dict[str, Any]) -> _Completion:
    if not isinstance(raw, dict):
        raise FieldError(path, f"expected an object, got {type(raw).__name__}")
    rating = _optional(raw, "rating", int, path)
    if rating is not None and rating not in RATINGS:
        raise FieldError(f"{path}.rating", f"is {rating}; expected -1, 0, 1 or null")
    metadata = {**origin, "flagged": raw.get("flagged")}
    if "source" in raw:
        metadata["source"] = raw["source"]
    step = ParsedStep(
        kind="thought",
        role="assistant",
        content=require(raw, "text", str, path),
        labelable=True,
        metadata=metadata,
    )
    return _Completion(step=step, rating=rating, raw=raw)


def _label(step_index: int, rating: int) -> ParsedLabel:
    return ParsedLabel(step_index=step_index, value=rating, annotator=ANNOTATOR)


def _optional(
    record: dict[str, Any], key: str, kind: type | tuple[type, ...], path: str = ""
) -> Any:
    """``record[key]`` checked like :func:`require`, or None when absent or null."""
    if record.get(key) is None:
        return None
    return require(record, key, kind, path)
