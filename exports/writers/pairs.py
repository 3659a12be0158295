"""Step-level preference pairs for DPO (no Django).

Rollouts of one task that share their first *k* steps share those steps' prefix hashes,
so the steps that follow one prefix (the *siblings* at a branch point) are alternatives
for the same next step. Grouping every labelable step by its parent prefix (the previous
step's ``prefix_hash``, or the task for step 0) finds the branch points without a tree:

- a *node* is one distinct next step (one ``prefix_hash``); the same step reached by
  several rollouts is one node, valued by the mean of its copies' values;
- two sibling nodes whose values differ by at least ``min_margin`` make a pair, the
  higher-valued step chosen;
- a labelable step with an annotator's correction makes a pair too: the correction
  chosen over the step as written (once per step and correction text).

The prompt is ``text.prompt_text(task, shared prefix steps)``, the completions
``text.step_text`` of each step (a correction is written as the annotator gave it). Pairs
whose two texts are equal are skipped: they would teach nothing.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from exports.writers.inputs import ExportOptions, ExportStep, ExportTrajectory, TaskGroup
from exports.writers.labels import map_label
from exports.writers.text import prompt_text, step_text

Record = dict[str, Any]


@dataclass
class _Node:
    trajectory: ExportTrajectory
    position: int
    values: list[float] = field(default_factory=list)

    @property
    def step(self) -> ExportStep:
        return self.trajectory.steps[self.position]

    def value(self) -> float | None:
        return math.fsum(self.values) / len(self.values) if self.values else None


def step_value(step: ExportStep, options: ExportOptions) -> float | None:
    """The value DPO compares: the mapped label, the score or the credit (NaN is none)."""
    if options.pair_value == "label":
        label = map_label(step.label, options.neutral)
        return None if label is None else float(label)
    value = step.score if options.pair_value == "score" else step.credit
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def dpo_records(group: TaskGroup, options: ExportOptions, tally: Counter[str]) -> Iterator[Record]:
    """``{"prompt", "chosen", "rejected"}`` pairs from all rollouts of one task: sibling
    pairs in the order their branch points and steps first appear, then corrections."""
    # parent key -> {child prefix hash -> node}; dicts keep first-appearance order.
    branches: dict[str, dict[str, _Node]] = {}
    corrections: dict[tuple[str, str], _Node] = {}
    for trajectory in group.trajectories:
        root = "task\x00" + trajectory.task
        for position, step in enumerate(trajectory.steps):
            if not step.labelable:
                continue
            parent = trajectory.steps[position - 1].prefix_hash if position else root
            siblings = branches.setdefault(parent, {})
            node = siblings.get(step.prefix_hash)
            if node is None:
                node = siblings[step.prefix_hash] = _Node(trajectory, position)
            value = step_value(step, options)
            if value is not None:
                node.values.append(value)
            correction = step.correction
            if options.corrections and correction and correction.strip():
                corrections.setdefault((step.prefix_hash, correction), _Node(trajectory, position))

    for siblings in branches.values():
        valued = [(node, node.value()) for node in siblings.values()]
        candidates = [(node, value) for node, value in valued if value is not None]
        for first, (node_a, value_a) in enumerate(candidates):
            for node_b, value_b in candidates[first + 1 :]:
                if value_a == value_b or abs(value_a - value_b) < options.min_margin:
                    continue
                chosen, rejected = (node_a, node_b) if value_a > value_b else (node_b, node_a)
                record = _pair(
                    chosen.trajectory,
                    chosen.position,
                    step_text(chosen.step),
                    step_text(rejected.step),
                )
                if record is None:
                    tally["skipped_equal_texts"] += 1
                    continue
                tally["sibling_pairs"] += 1
                yield record

    for (_, correction), node in corrections.items():
        record = _pair(node.trajectory, node.position, correction, step_text(node.step))
        if record is None:
            tally["skipped_equal_texts"] += 1
            continue
        tally["correction_pairs"] += 1
        yield record


def _pair(trajectory: ExportTrajectory, position: int, chosen: str, rejected: str) -> Record | None:
    if chosen == rejected:
        return None
    prefix: Sequence[ExportStep] = trajectory.steps[:position]
    return {"prompt": prompt_text(trajectory.task, prefix), "chosen": chosen, "rejected": rejected}
