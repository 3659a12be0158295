"""A task's rollouts as a prefix tree."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models.functions import Left

from trajectories.models import (
    Project,
    Step,
    Trajectory,
)

TREE_MAX_ROLLOUTS = 500
TREE_PREVIEW_CHARS = 160


@dataclass
class TreeStep:
    pk: int
    index: int
    role: str
    kind: str
    tool_name: str
    preview: str


@dataclass
class TaskRollouts:
    trajectories: list[Trajectory]  # with a known outcome, in id order
    hashes: list[list[str]]
    steps: list[list[TreeStep]]
    outcomes: list[float]
    unknown_outcome: int  # rollouts left out: their outcome is unknown
    truncated: bool  # more than TREE_MAX_ROLLOUTS rollouts; the first ones are shown


def task_rollouts(project: Project, task_key: str) -> TaskRollouts:
    """Rollouts of one task with their steps' prefix hashes and outcomes (success as 1/0,
    else a reward within [0, 1])."""
    candidates = list(
        Trajectory.objects.filter(project=project, task_key=task_key)
        .only("id", "external_id", "success", "outcome_reward", "step_count")
        .order_by("id")[: TREE_MAX_ROLLOUTS + 1]
    )
    truncated = len(candidates) > TREE_MAX_ROLLOUTS
    kept: list[Trajectory] = []
    outcomes: list[float] = []
    for trajectory in candidates[:TREE_MAX_ROLLOUTS]:
        if trajectory.success is not None:
            outcomes.append(1.0 if trajectory.success else 0.0)
        elif trajectory.outcome_reward is not None and 0.0 <= trajectory.outcome_reward <= 1.0:
            outcomes.append(trajectory.outcome_reward)
        else:
            continue
        kept.append(trajectory)
    by_trajectory: dict[int, list[tuple[str, TreeStep]]] = {t.pk: [] for t in kept}
    rows = (
        Step.objects.filter(trajectory_id__in=list(by_trajectory))
        .annotate(preview=Left("content", TREE_PREVIEW_CHARS))
        .values_list(
            "trajectory_id",
            "pk",
            "index",
            "role",
            "kind",
            "tool_name",
            "preview",
            "prefix_hash",
        )
        .order_by("trajectory_id", "index")
    )
    for trajectory_id, pk, index, role, kind, tool_name, preview, prefix_hash in rows:
        by_trajectory[trajectory_id].append(
            (prefix_hash, TreeStep(pk, index, role, kind, tool_name, preview))
        )
    return TaskRollouts(
        trajectories=kept,
        hashes=[[h for h, _ in by_trajectory[t.pk]] for t in kept],
        steps=[[s for _, s in by_trajectory[t.pk]] for t in kept],
        outcomes=outcomes,
        unknown_outcome=len(candidates[:TREE_MAX_ROLLOUTS]) - len(kept),
        truncated=truncated,
    )
