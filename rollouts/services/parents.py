"""Trajectories as the rollout code reads them: the stored steps a continuation repeats,
and the outcome an answer check gives them."""

from __future__ import annotations

from collections.abc import Iterable

from rollouts import answers
from rollouts.continuations import Parent, StoredStep
from trajectories.models import Step, Trajectory


def parents_load(trajectory_ids: Iterable[int]) -> dict[int, Parent]:
    """Each trajectory with all of its steps, in two queries."""
    ids = sorted(set(trajectory_ids))
    rows = Trajectory.objects.filter(pk__in=ids).values_list(
        "pk", "external_id", "task", "task_key", "ground_truth"
    )
    info = {row[0]: row[1:] for row in rows}
    steps: dict[int, list[StoredStep]] = {pk: [] for pk in info}
    step_rows = (
        Step.objects.filter(trajectory_id__in=ids)
        .order_by("trajectory_id", "index")
        .values_list(
            "trajectory_id",
            "kind",
            "role",
            "content",
            "labelable",
            "agent",
            "tool_name",
            "tool_args",
            "metadata",
        )
    )
    for trajectory_id, *fields in step_rows.iterator(chunk_size=5000):
        kind, role, content, labelable, agent, tool_name, tool_args, metadata = fields
        steps[trajectory_id].append(
            StoredStep(kind, role, content, labelable, agent, tool_name, tool_args, metadata)
        )
    return {
        pk: Parent(pk, external_id, task, task_key, ground_truth, tuple(steps[pk]))
        for pk, (external_id, task, task_key, ground_truth) in info.items()
    }


def checked_steps(steps: Iterable[StoredStep]) -> tuple[answers.CheckedStep, ...]:
    return tuple(answers.CheckedStep(s.content, s.role, s.kind) for s in steps)


def checked_trajectory(parent: Parent) -> answers.CheckedTrajectory:
    return answers.CheckedTrajectory(
        task=parent.task, ground_truth=parent.ground_truth, steps=checked_steps(parent.steps)
    )


def parent_outcome(
    parent: Parent, stored_success: bool | None, check: answers.AnswerCheck
) -> bool | None:
    """Whether the trajectory itself succeeded: its stored outcome, else the answer
    check on its own last step; None when there is nothing to check against."""
    if stored_success is not None:
        return stored_success
    if not parent.ground_truth.strip() and check.kind != "python":
        return None
    whole = answers.CheckedContinuation(
        prefix_steps=checked_steps(parent.steps), generated_steps=(), text="", finished=True
    )
    return answers.check_answer(check, checked_trajectory(parent), whole)
