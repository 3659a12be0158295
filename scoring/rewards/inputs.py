"""What a reward request's trajectories become, and what its answer is made of: the
request's items (Stepscope records, OpenAI chat runs, OpenRLHF query strings) parsed by
the import formats' own checks, turned into the scorer's inputs, and the per-step values
the worker reads folded into one reward per trajectory.

A problem raises :class:`RewardInputError` naming the item and the field
(``trajectories.3.messages.2.role``), so a trainer sees which rollout of its batch is bad.
"""

# Django-free: parsing and reward maths on plain data, shared by the web side and tests.
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scoring.attribution import aggregate, prm_delta
from scoring.prm.base import StepInput, TrajectoryInput
from trajectories.formats import openai_messages, stepscope
from trajectories.formats.base import FieldError, ParsedStep, ParsedTrajectory

AGGREGATES = ("min", "product", "mean", "last")
# Per-step credit that needs no rollouts: the change of the scorer's value at each step
# (``scoring.attribution.prm_delta``), from 1 before the first scored step.
CREDITS = ("none", "prm-delta")


class RewardInputError(ValueError):
    """A request item the service cannot score; ``field`` is its dotted path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def trajectories_parse(
    items: Sequence[Any], *, field: str = "trajectories"
) -> list[ParsedTrajectory]:
    """Each item as a trajectory: a Stepscope record (an object with ``steps``, as
    ``POST /imports/`` takes it), an OpenAI chat run (an object with ``messages``, as the
    ``openai-messages`` import reads it) or a bare list of chat messages."""
    parsed = []
    for index, item in enumerate(items):
        path = f"{field}.{index}"
        try:
            parsed.append(_item(item, index))
        except FieldError as error:
            raise RewardInputError(
                f"{path}.{error.field}" if error.field else path, error.message
            ) from None
    return parsed


def _item(item: Any, index: int) -> ParsedTrajectory:
    location = f"record {index}"
    if isinstance(item, list):
        return openai_messages.run_parse({"messages": item, "id": str(index)}, index, location)
    if not isinstance(item, dict):
        raise FieldError(
            "", f"expected a trajectory object or a list of messages, got {type(item).__name__}"
        )
    if "steps" in item:
        result = next(iter(stepscope.parse_records([item])))
        if isinstance(result, ParsedTrajectory):
            return result
        raise FieldError(result.field, result.message)
    if "messages" in item or "traj" in item:
        return openai_messages.run_parse(item, index, location)
    raise FieldError(
        "", "has neither steps (a Stepscope trajectory) nor messages (an OpenAI chat run)"
    )


def openrlhf_parse(
    queries: Sequence[Any], prompts: Sequence[Any] | None, *, separator: str
) -> list[ParsedTrajectory]:
    """OpenRLHF's remote reward body: each ``query`` is the prompt and the response as
    one string; the matching ``prompts`` entry, where given and a prefix of the query,
    is the task, and the rest is the response, cut into steps at ``separator``."""
    if prompts is not None and len(prompts) != len(queries):
        raise RewardInputError(
            "prompts", f"has {len(prompts)} entries for {len(queries)} queries; give one per query"
        )
    parsed = []
    for index, query in enumerate(queries):
        if not isinstance(query, str):
            raise RewardInputError(
                f"query.{index}", f"expected a string, got {type(query).__name__}"
            )
        prompt = prompts[index] if prompts is not None else ""
        if not isinstance(prompt, str):
            raise RewardInputError(
                f"prompts.{index}", f"expected a string, got {type(prompt).__name__}"
            )
        response = query[len(prompt) :] if prompt and query.startswith(prompt) else query
        task = prompt if prompt and query.startswith(prompt) else ""
        pieces = [piece.strip() for piece in response.split(separator)] if separator else [response]
        steps = [
            ParsedStep(kind="message", role="assistant", content=piece, labelable=True)
            for piece in pieces
            if piece
        ]
        if not steps:
            raise RewardInputError(f"query.{index}", "has no response text after its prompt")
        parsed.append(ParsedTrajectory(external_id=str(index), task=task, steps=steps))
    return parsed


def scorer_inputs(trajectories: Sequence[ParsedTrajectory]) -> list[TrajectoryInput]:
    """The scorer's inputs: every step, keyed by its index; the labelable ones are
    scored (system prompts, user turns and tool results are context)."""
    return [
        TrajectoryInput(
            index,
            trajectory.task,
            tuple(
                StepInput(number, step.content, step.role, step.labelable, step.labelable)
                for number, step in enumerate(trajectory.steps)
            ),
        )
        for index, trajectory in enumerate(trajectories)
    ]


@dataclass(frozen=True)
class TrajectoryReward:
    """One trajectory's answer: a value per step (None for steps not scored), the
    aggregate over the scored ones (None where there are none) and, when asked, each
    step's credit."""

    steps: list[float | None]
    reward: float | None
    credits: list[float | None] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"steps": self.steps, "reward": self.reward}
        if self.credits is not None:
            out["credits"] = self.credits
        return out


def rewards_fold(
    step_values: Sequence[Sequence[float | None]], *, how: str, credit: str = "none"
) -> list[TrajectoryReward]:
    """The reward of each trajectory from its step values, by ``how`` (one of
    :data:`AGGREGATES`), with the per-step ``credit`` where asked."""
    if how not in AGGREGATES:
        raise ValueError(f"unknown aggregate {how!r}; expected one of {', '.join(AGGREGATES)}")
    if credit not in CREDITS:
        raise ValueError(f"unknown credit {credit!r}; expected one of {', '.join(CREDITS)}")
    scored = [[v for v in values if v is not None] for values in step_values]
    offsets = [0]
    for kept in scored:
        offsets.append(offsets[-1] + len(kept))
    flat = [v for kept in scored for v in kept]
    totals = aggregate(flat, offsets, how=how)  # type: ignore[arg-type]
    deltas = prm_delta(flat, offsets) if credit == "prm-delta" else None
    out = []
    for index, values in enumerate(step_values):
        credits: list[float | None] | None = None
        if deltas is not None:
            it = iter(deltas[offsets[index] : offsets[index + 1]].tolist())
            credits = [None if v is None else next(it) for v in values]
        total = float(totals[index])
        out.append(TrajectoryReward(list(values), None if math.isnan(total) else total, credits))
    return out
