"""Leave-one-out and Shapley credit with a loaded scorer as the value function (no Django).

The value of a coalition is the scorer's score of the trajectory edited to keep only the
coalition's steps: ``v(S)`` keeps the steps that are not players (the task's context, tool
outputs, another agent's turns when agents are the players) and the players in ``S``, in
their original order, and reads the scorer at the kept labelable steps, combined by
``how`` (``last``: the value after the last kept step, the scorer's belief that the
solution so far is right). A coalition with no labelable step left has the value
``empty``.

The maths is :mod:`scoring.attribution`, which calls the value function one coalition at a
time. Which coalitions it asks for does not depend on the values (the permutations come
from a seeded generator), so each trajectory is run twice: once with a recorder that
notes the coalitions, then, after every coalition of every trajectory in the chunk has
been scored in one length-sorted batch, again with the scores looked up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, cast

import numpy as np

from scoring import attribution
from scoring.prm.base import StepResult, TrajectoryInput

Coalition = frozenset[int]
# Exact Shapley values when enumerating every coalition costs no more than sampling.
EXACT_WHEN_AT_MOST = 1 << 10


class Scores(Protocol):
    def score(self, trajectories: list[TrajectoryInput]) -> list[StepResult]: ...


@dataclass(frozen=True)
class StepValue:
    key: int  # the step's id
    value: float
    detail: dict[str, Any] | None = None


@dataclass(frozen=True)
class TrajectoryCredit:
    """Credits of one trajectory's players and what the method reports about it."""

    key: int
    credits: list[StepValue]
    report: dict[str, Any]


def kept_trajectory(
    trajectory: TrajectoryInput, kept: Coalition, how: str, key_base: int
) -> TrajectoryInput | None:
    """The trajectory with only the ``kept`` step positions, re-keyed ``key_base + position``
    so many edits can share one batch, cut after the last step to read; None when no
    labelable step is kept."""
    steps = [
        replace(step, key=key_base + position, score=False)
        for position, step in enumerate(trajectory.steps)
        if position in kept
    ]
    labelable = [i for i, step in enumerate(steps) if step.labelable]
    if not labelable:
        return None
    read = labelable[-1:] if how == "last" else labelable
    for i in read:
        steps[i] = replace(steps[i], score=True)
    return TrajectoryInput(trajectory.key, trajectory.task, tuple(steps[: labelable[-1] + 1]))


def _combine(values: list[float], how: str) -> float:
    array = np.asarray(values, dtype=np.float64)
    return float(attribution.aggregate(array, how=cast(attribution.Aggregation, how))[0])


def evaluate(
    scorer: Scores,
    requests: Sequence[tuple[TrajectoryInput, Coalition]],
    *,
    how: str = "last",
    empty: float = 1.0,
) -> list[float]:
    """``v`` of each (trajectory, kept positions) request, all scored in one call."""
    stride = 1 + max((len(t.steps) for t, _ in requests), default=0)
    edited: list[TrajectoryInput] = []
    owners: list[int] = []
    for number, (trajectory, kept) in enumerate(requests):
        edit = kept_trajectory(trajectory, kept, how, number * stride)
        if edit is not None:
            edited.append(edit)
            owners.append(number)
    read: dict[int, list[tuple[int, float]]] = {number: [] for number in owners}
    for result in scorer.score(edited):
        number, position = divmod(result.key, stride)
        read[number].append((position, result.value))
    values = [empty] * len(requests)
    for number, pairs in read.items():
        pairs.sort()
        values[number] = _combine([value for _, value in pairs], how)
    return values


# --- Players and the maths -----------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One trajectory's credit computation: ``compute`` runs a function of
    :mod:`scoring.attribution` with a value function over coalitions of kept positions."""

    trajectory: TrajectoryInput
    compute: Callable[[Callable[[Coalition], float]], Any]
    finish: Callable[[Any], TrajectoryCredit]


def _players(trajectory: TrajectoryInput) -> list[int]:
    return [i for i, step in enumerate(trajectory.steps) if step.labelable]


def leave_one_out_job(trajectory: TrajectoryInput) -> Job:
    """Credit of each labelable step: ``v(all) - v(all without the step)``."""
    players = _players(trajectory)
    fixed = frozenset(range(len(trajectory.steps))) - set(players)

    def compute(v: Callable[[Coalition], float]) -> Any:
        def on_players(members: frozenset[int]) -> float:
            return v(fixed | {players[i] for i in members})

        return attribution.leave_one_out(on_players, len(players))

    def finish(values: Any) -> TrajectoryCredit:
        credits = [
            StepValue(trajectory.steps[p].key, float(value))
            for p, value in zip(players, values, strict=True)
        ]
        return TrajectoryCredit(trajectory.key, credits, {"players": len(players)})

    return Job(trajectory, compute, finish)


def agents_of(trajectory: TrajectoryInput, agents: Sequence[str]) -> dict[str, list[int]]:
    """Each agent's labelable step positions (``agents`` gives each step's agent)."""
    owners: dict[str, list[int]] = {}
    for position, (step, agent) in enumerate(zip(trajectory.steps, agents, strict=True)):
        if agent and step.labelable:
            owners.setdefault(agent, []).append(position)
    return owners


def shapley_job(
    trajectory: TrajectoryInput,
    *,
    permutations: int,
    seed: int,
    agents: Sequence[str] | None = None,
) -> Job:
    """Shapley values of the labelable steps, or with ``agents`` (each step's agent) of
    the agents: a coalition of agents keeps their steps and every step no agent owns.
    Exact when enumerating the coalitions costs no more than the sampling budget.

    An agent's value is shared equally by its steps, so per-step credits still add up to
    ``v(all) - v(none)``; each step's detail names its agent and the agent's value."""
    if agents is not None:
        owners = agents_of(trajectory, agents)
        shared = frozenset(range(len(trajectory.steps))) - {p for s in owners.values() for p in s}
        n = len(owners)
    else:
        players = _players(trajectory)
        fixed = frozenset(range(len(trajectory.steps))) - set(players)
        n = len(players)
    exact = n <= 20 and (1 << n) <= min(EXACT_WHEN_AT_MOST, permutations * max(n, 1))

    def compute(v: Callable[[Coalition], float]) -> attribution.ShapleyResult:
        if agents is not None:
            return attribution.agent_shapley(
                v, owners, shared=shared, permutations=None if exact else permutations, seed=seed
            )

        def on_players(members: frozenset[int]) -> float:
            return v(fixed | {players[i] for i in members})

        if exact:
            return attribution.shapley_exact(on_players, n)
        return attribution.shapley_sampled(on_players, n, permutations=permutations, seed=seed)

    def finish(result: attribution.ShapleyResult) -> TrajectoryCredit:
        credits = []
        errors = result.std_error
        for number, player in enumerate(result.players):
            value = float(result.values[number])
            error = None if errors is None else float(errors[number])
            if agents is not None:
                positions = owners[str(player)]
                for p in positions:
                    detail = {"agent": str(player), "agent_value": value}
                    if error is not None:
                        detail["agent_std_error"] = error
                    credits.append(
                        StepValue(trajectory.steps[p].key, value / len(positions), detail)
                    )
            else:
                key = trajectory.steps[players[int(player)]].key
                credits.append(
                    StepValue(key, value, {"std_error": error} if errors is not None else None)
                )
        report = {
            "players": len(result.players),
            "over": "agents" if agents is not None else "steps",
            "exact": exact,
            "v_all": result.v_all,
            "v_empty": result.v_empty,
            "efficiency_gap": result.efficiency_gap,
            "evaluations": result.evaluations,
            "mean_std_error": (
                None if errors is None or not len(errors) else float(np.nanmean(errors))
            ),
        }
        return TrajectoryCredit(trajectory.key, credits, report)

    return Job(trajectory, compute, finish)


def run_jobs(
    scorer: Scores, jobs: Sequence[Job], *, how: str = "last", empty: float = 1.0
) -> list[TrajectoryCredit]:
    """Run every job's maths with all their coalitions scored in one batch."""
    asked: list[dict[Coalition, None]] = []
    for job in jobs:
        seen: dict[Coalition, None] = {}

        def record(kept: Coalition, seen: dict[Coalition, None] = seen) -> float:
            seen.setdefault(frozenset(kept), None)
            return 0.0

        job.compute(record)
        asked.append(seen)
    requests = [
        (job.trajectory, kept) for job, seen in zip(jobs, asked, strict=True) for kept in seen
    ]
    values = iter(evaluate(scorer, requests, how=how, empty=empty))
    out = []
    for job, seen in zip(jobs, asked, strict=True):
        table = {kept: next(values) for kept in seen}

        def lookup(kept: Coalition, table: dict[Coalition, float] = table) -> float:
            return table[frozenset(kept)]

        out.append(job.finish(job.compute(lookup)))
    return out
