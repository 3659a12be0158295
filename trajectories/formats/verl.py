"""verl rollout dumps (``trainer.rollout_data_dir`` / ``validation_data_dir``): one JSON
Lines file per training step, ``<global step>.jsonl``, written by the trainer's
``_dump_generations``: ``{input, output, gts, score, step, <reward extra infos>...}``,
one line per sampled response.

``input`` is the prompt as the model saw it (chat template applied) and ``output`` the
response: a trajectory of two steps, the prompt (not labelable: the policy did not write
it) and the answer (labelable, carrying the training step). ``score`` is the outcome
reward; ``gts`` the ground truth (older verl leaves it out). The reward function's extra
infos (``acc``, ``pred``, ...) that are scalars go to the metadata; ``acc`` given as a
bool or 0/1 also sets ``success``. verl's dump has no advantage, logprob or policy
version, so those stay unknown. The rollouts of one prompt share a task key (verl's
``uid`` where the dump carries it, else a digest of ``input``), so they form the GRPO
group they were in.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trajectories.formats import jsonstream, register
from trajectories.formats.base import (
    FieldError,
    ParsedStep,
    ParsedTrajectory,
    ParseResult,
    StepTraining,
    require,
)
from trajectories.formats.trainers import integer, number, prompt_key, scalar

KNOWN = ("input", "output", "gts", "score", "step")


@register("verl", label="verl rollout dumps (JSON Lines per step)", suffixes=(".jsonl",))
def parse(path: Path) -> Iterator[ParseResult]:
    yield from jsonstream.records_built(path, _trajectory)


def _trajectory(record: Any, location: str) -> ParsedTrajectory:
    if not isinstance(record, dict):
        raise FieldError("", f"expected a rollout object, got {type(record).__name__}")
    prompt = require(record, "input", str)
    output = require(record, "output", str)
    score = number(require(record, "score", (int, float)), "score")
    step = integer(require(record, "step", (int, float)), "step")
    gts = record.get("gts")
    ground_truth = "" if gts is None else gts if isinstance(gts, str) else json.dumps(gts)
    uid = record.get("uid")
    metadata = {key: value for key, value in record.items() if key not in KNOWN and scalar(value)}
    acc = record.get("acc")
    success = bool(acc) if isinstance(acc, bool) or acc in (0, 1) else None
    return ParsedTrajectory(
        external_id=f"step-{step}:{location.split()[-1]}",
        task=prompt,
        task_key=f"verl:{uid}" if isinstance(uid, str) and uid else prompt_key("verl", prompt),
        ground_truth=ground_truth,
        steps=[
            ParsedStep(kind="message", role="user", content=prompt, labelable=False),
            ParsedStep(
                kind="answer",
                role="assistant",
                content=output,
                labelable=True,
                training=StepTraining(training_step=step),
            ),
        ],
        outcome_reward=score,
        success=success,
        metadata=metadata,
        raw=record,
        location=location,
        training_step=step,
    )
