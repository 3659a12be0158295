"""RL batches (no Django): one row per step with its reward and credit, and verl-style
prompt records.

Step rows carry what a trainer needs to weight steps: the step reward (the mapped label
as a float, or the chosen scorer's score), the credit or advantage from the chosen
attribution run, and the trajectory's outcome. The prompt records follow verl's RL data
shape (``data_source``, ``prompt`` as chat messages, ``ability``, ``reward_model`` with
the rule-based ``ground_truth``, ``extra_info``), one per task unless asked for one per
trajectory: a trainer samples its own rollouts per prompt, and a prompt repeated for
each stored rollout would weight tasks by how many rollouts were kept.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from typing import Any

from exports.writers.inputs import ExportOptions, ExportTrajectory, TaskGroup
from exports.writers.labels import map_label
from exports.writers.text import chat_messages, step_text

Record = dict[str, Any]


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def rl_step_rows(group: TaskGroup, options: ExportOptions, tally: Counter[str]) -> Iterator[Record]:
    """Every step of every trajectory, in order. ``task_key`` is the group key (the
    task key, or a hash of the task text when there is none) so rows of one task always
    share it; rewards and credits that are missing (or NaN) are null."""
    by_score = options.step_reward == "score"
    neutral = options.neutral
    for trajectory in group.trajectories:
        outcome = _finite(trajectory.outcome_reward)
        for step in trajectory.steps:
            if by_score:
                reward = _finite(step.score)
            else:
                label = map_label(step.label, neutral)
                reward = None if label is None else float(label)
            yield {
                "trajectory_id": trajectory.id,
                "external_id": trajectory.external_id,
                "task_key": group.key,
                "step_index": step.index,
                "role": step.role,
                "kind": step.kind,
                "labelable": step.labelable,
                "step_text": step_text(step),
                "step_reward": reward,
                "credit": _finite(step.credit),
                "outcome_reward": outcome,
                "success": trajectory.success,
            }


def verl_prompt_records(
    group: TaskGroup, options: ExportOptions, tally: Counter[str]
) -> Iterator[Record]:
    """The prompt is the chat messages before the trajectory's first labelable step
    (system and user turns), or the task as a user message. ``extra_info.index`` numbers
    the records of each split from 0."""
    if options.prompts_per == "task":
        chosen = list(enumerate(group.trajectories[:1], start=group.index))
    else:
        chosen = list(enumerate(group.trajectories, start=group.trajectory_offset))
    for index, trajectory in chosen:
        yield _prompt_record(trajectory, group, index, options)


def _prompt_record(
    trajectory: ExportTrajectory, group: TaskGroup, index: int, options: ExportOptions
) -> Record:
    leading = []
    for step in trajectory.steps:
        if step.labelable:
            break
        leading.append(step)
    messages = [
        {"role": message["role"], "content": message["content"]}
        for message in chat_messages(trajectory.task, leading)
    ]
    return {
        "data_source": options.data_source or trajectory.source_format,
        "prompt": messages,
        "ability": options.ability,
        "reward_model": {"style": "rule", "ground_truth": trajectory.ground_truth},
        "extra_info": {"split": group.split, "index": index, "task_key": group.key},
    }
