"""TRL's stepwise supervision format, used to train process reward models with
``trl.PRMTrainer``: ``{"prompt": str, "completions": [str], "labels": [bool]}``, one
label per completion (step), as in ``trl-lib/math_shepherd`` and ``trl-lib/prm800k``.

A file is JSON Lines, a JSON array, or a single object. Each completion becomes a
labelable step and each label an imported label, ``true`` as +1 and ``false`` as -1.
"""

from __future__ import annotations

import hashlib
import json
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

ANNOTATOR = "import:trl-stepwise"


@register("trl-stepwise", label="TRL stepwise supervision")
def parse(path: Path) -> Iterator[ParseResult]:
    yield from jsonstream.records_built(path, _trajectory)


def _digest(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _trajectory(record: Any, location: str) -> ParsedTrajectory:
    if not isinstance(record, dict):
        raise FieldError("", f"expected an object, got {type(record).__name__}")
    prompt = require(record, "prompt", str)
    completions = require(record, "completions", list)
    labels = require(record, "labels", list)
    if not completions:
        raise FieldError("completions", "is empty; a solution needs at least one step")
    for index, completion in enumerate(completions):
        if not isinstance(completion, str):
            raise FieldError(
                f"completions.{index}", f"expected str, got {type(completion).__name__}"
            )
    if len(labels) != len(completions):
        raise FieldError(
            "labels",
            f"has {len(labels)} labels for {len(completions)} completions; expected one each",
        )
    for index, label in enumerate(labels):
        if not isinstance(label, bool):
            raise FieldError(f"labels.{index}", f"expected bool, got {type(label).__name__}")

    record_id = record.get("id")
    if record_id is not None:
        external_id = str(require(record, "id", (str, int)))
        if not external_id.strip():
            raise FieldError("id", "is empty")
    else:
        # The format has no id; the prompt and steps identify a record, so re-imports match.
        external_id = "trl-" + _digest([prompt, completions])
    return ParsedTrajectory(
        external_id=external_id,
        task=prompt,
        steps=[
            ParsedStep(kind="thought", role="assistant", content=completion, labelable=True)
            for completion in completions
        ],
        task_key="trl-" + _digest(prompt),
        first_error_index=labels.index(False) if False in labels else -1,
        metadata={
            key: value
            for key, value in record.items()
            if key not in ("prompt", "completions", "labels")
        },
        labels=[
            ParsedLabel(step_index=index, value=1 if label else -1, annotator=ANNOTATOR)
            for index, label in enumerate(labels)
        ],
        raw=record,
        location=location,
    )
