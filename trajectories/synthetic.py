"""Synthetic multi-step arithmetic rollouts with known first errors (no Django).

Stepscope makes its own demo and benchmark data: each task is a chain of operations on a
starting number; each rollout works through it one step at a time and may slip at one
step (a wrong result that later steps then carry forward). Because the slip is injected,
every rollout has ground truth: its first-error index and whether the answer is right.
Rollouts of one task that have not slipped yet share their steps, so they share prefix
hashes, as real rollouts from a common prompt do.

Records come out in Stepscope JSONL shape (see docs/formats.md).
"""

# Django-free: demo, bench and tests generate rollouts without a database.
from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

OPERATIONS = ("+", "-", "*")
TRUTH_ANNOTATOR = "import:synthetic-truth"


def _apply(value: int, op: str, operand: int) -> int:
    if op == "+":
        return value + operand
    if op == "-":
        return value - operand
    return value * operand


def rollouts(
    *, tasks: int, rollouts_per_task: int = 4, steps_per_task: int = 6, seed: int = 0
) -> Iterator[dict[str, Any]]:
    """Yield ``tasks * rollouts_per_task`` records, each with ``steps_per_task + 1`` steps
    (the operations, then the answer)."""
    rng = random.Random(seed)
    for task_number in range(tasks):
        start = rng.randint(2, 40)
        chain = [(rng.choice(OPERATIONS), rng.randint(2, 9)) for _ in range(steps_per_task)]
        truth = start
        for op, operand in chain:
            truth = _apply(truth, op, operand)
        task = (
            f"Start from {start} and apply, in order: "
            + ", ".join(f"{op} {operand}" for op, operand in chain)
            + ". What is the result?"
        )
        for rollout in range(rollouts_per_task):
            # About half the rollouts slip once, at a random step.
            slip = rng.randrange(steps_per_task) if rng.random() < 0.5 else None
            value = start
            steps: list[dict[str, Any]] = []
            for index, (op, operand) in enumerate(chain):
                correct = _apply(value, op, operand)
                result = correct + rng.choice((-3, -2, -1, 1, 2, 3)) if index == slip else correct
                steps.append(
                    {
                        "kind": "thought",
                        "role": "assistant",
                        "content": f"Step {index + 1}: {value} {op} {operand} = {result}",
                        "labels": [],
                    }
                )
                value = result
            steps.append(
                {
                    "kind": "answer",
                    "role": "assistant",
                    "content": f"The answer is {value}.",
                    "labels": [],
                }
            )
            # Truth labels: good until the slip, bad at the slip, unlabeled after it.
            for index, step in enumerate(steps):
                if slip is None or index < slip:
                    step["labels"] = [{"annotator": TRUTH_ANNOTATOR, "value": 1}]
                elif index == slip:
                    step["labels"] = [{"annotator": TRUTH_ANNOTATOR, "value": -1}]
            success = value == truth
            yield {
                "id": f"arith-{seed}-{task_number}-{rollout}",
                "task": task,
                "task_key": f"arith-{seed}-{task_number}",
                "ground_truth": str(truth),
                "model": "synthetic-slipper",
                "outcome": {"reward": 1.0 if success else 0.0, "success": success},
                "first_error_index": -1 if slip is None else slip,
                "metadata": {"generator": "stepscope.synthetic", "seed": seed},
                "steps": steps,
            }


def write_jsonl(path: Path, records: Iterator[dict[str, Any]]) -> int:
    """Write records one per line; return the number of steps written."""
    step_total = 0
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            step_total += len(record["steps"])
    return step_total
