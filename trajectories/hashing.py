"""Content and prefix hashes for trajectories (no Django).

``prefix_hash`` of step *i* chains the hash of step *i-1* with step *i*'s content, rooted
at the task text, so rollouts of one task that share their first *i* steps share prefix
hashes: the prefix tree, Monte Carlo values and sibling comparisons become plain SQL.
``content_hash`` identifies a whole trajectory (task, steps, outcome, source id), so
re-importing the same record changes nothing.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from trajectories.formats.base import ParsedStep, ParsedTrajectory


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def _step_key(step: ParsedStep) -> list[Any]:
    return [step.kind, step.role, step.agent, step.content, step.tool_name, step.tool_args]


def prefix_hashes(task: str, steps: list[ParsedStep]) -> list[str]:
    hashes = []
    current = hashlib.sha256(_canonical(["task", task])).hexdigest()
    for step in steps:
        current = hashlib.sha256(_canonical([current, _step_key(step)])).hexdigest()
        hashes.append(current)
    return hashes


def content_hash(trajectory: ParsedTrajectory, source_format: str) -> str:
    return hashlib.sha256(
        _canonical(
            [
                source_format,
                trajectory.external_id,
                trajectory.task,
                trajectory.ground_truth,
                trajectory.model_name,
                trajectory.outcome_reward,
                trajectory.success,
                [[*_step_key(step), step.labelable, step.metadata] for step in trajectory.steps],
                [[label.step_index, label.value, label.annotator] for label in trajectory.labels],
                trajectory.metadata,
            ]
        )
    ).hexdigest()
