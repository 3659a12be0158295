"""Trajectories as the JSON push takes them: Stepscope's own format (docs/formats.md).

A record may be a dict already in that format, Stepscope's ``ParsedTrajectory`` dataclass
(what its parsers return, recognised by its fields so the client needs no Stepscope code;
written as ``trajectories.formats.stepscope.to_record`` writes it, which a test checks),
or any other dataclass whose fields are the format's."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


def trajectory_record(record: Any) -> dict[str, Any]:
    """The JSON object the push sends for ``record``."""
    if isinstance(record, Mapping):
        return dict(record)
    if hasattr(record, "external_id") and hasattr(record, "steps"):
        return _parsed_trajectory_record(record)
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return dataclasses.asdict(record)
    raise TypeError(f"expected a dict or a dataclass, got {type(record).__name__}")


def _parsed_trajectory_record(trajectory: Any) -> dict[str, Any]:
    steps = list(trajectory.steps)
    labels_by_step: dict[int, list[dict[str, Any]]] = {}
    for label in trajectory.labels:
        if not 0 <= label.step_index < len(steps):
            raise ValueError(f"label for step {label.step_index} is outside the trajectory")
        labels_by_step.setdefault(label.step_index, []).append(
            {"annotator": label.annotator, "value": label.value}
        )
    return {
        "id": trajectory.external_id,
        "task": trajectory.task,
        "task_key": trajectory.task_key,
        "ground_truth": trajectory.ground_truth,
        "model": trajectory.model_name,
        "outcome": {"reward": trajectory.outcome_reward, "success": trajectory.success},
        "first_error_index": trajectory.first_error_index,
        "decisive": _decisive_record(getattr(trajectory, "decisive", None)),
        "metadata": trajectory.metadata,
        "training": _trajectory_training(trajectory),
        "steps": [
            {
                "kind": step.kind,
                "role": step.role,
                "content": step.content,
                "labelable": step.labelable,
                "agent": step.agent,
                "tool_name": step.tool_name,
                "tool_args": step.tool_args,
                "metadata": step.metadata,
                "training": _step_training(getattr(step, "training", None)),
                "labels": labels_by_step.get(index, []),
            }
            for index, step in enumerate(steps)
        ],
    }


def _decisive_record(decisive: Any) -> dict[str, Any] | None:
    """The decisive failure (which agent, at which step, decided that the run failed)."""
    if decisive is None:
        return None
    return {"agent": decisive.agent, "step": decisive.step_index, "reason": decisive.reason}


def _trajectory_training(trajectory: Any) -> dict[str, Any] | None:
    """An RL rollout's policy version and training step, where it has them."""
    version = getattr(trajectory, "policy_version", None)
    step = getattr(trajectory, "training_step", None)
    if version is None and step is None:
        return None
    facts = {"policy_version": version, "training_step": step}
    return {name: value for name, value in facts.items() if value is not None}


def _step_training(training: Any) -> dict[str, Any] | None:
    """A step's training facts (Stepscope's ``StepTraining``): the known ones."""
    if training is None:
        return None
    if dataclasses.is_dataclass(training) and not isinstance(training, type):
        facts = dataclasses.asdict(training)
    else:
        facts = dict(training)
    return {name: value for name, value in facts.items() if value is not None}
