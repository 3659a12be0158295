"""Debugging a rollout: two rollouts of one task side by side, matched step by step
(:mod:`trajectories.rollout_matching`), with each side's submitted labels and the step where each
annotator first marked it wrong. The model-against-human comparison is
:mod:`evaluation.compare`; this is rollout against rollout."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Q, QuerySet
from django.db.models.functions import Left, Length

from labeling.models import StepLabel
from trajectories import rollout_matching
from trajectories.models import Step, Trajectory
from trajectories.selectors import STEP_PREVIEW_CHARS


@dataclass
class DiffStep:
    pk: int
    index: int
    kind: str
    role: str
    agent: str
    content: str
    content_length: int
    tool_name: str
    tool_args: object
    labelable: bool
    prefix_hash: str
    labels: list[tuple[str, int]]  # (annotator username, value), submitted only


def diff_partner(trajectory: Trajectory) -> Trajectory | None:
    """A successful rollout of the same task, preferring the one that shares the longest
    prefix with ``trajectory`` (so the comparison starts where they part)."""
    if not trajectory.task_key:
        return None
    siblings = (
        Trajectory.objects.filter(
            project_id=trajectory.project_id, task_key=trajectory.task_key, success=True
        )
        .exclude(pk=trajectory.pk)
        .annotate(
            shared=Count(
                "steps",
                filter=Q(
                    steps__prefix_hash__in=Step.objects.filter(trajectory=trajectory).values(
                        "prefix_hash"
                    )
                ),
            )
        )
        .order_by("-shared", "id")
    )
    return siblings.select_related("project").first()


def rollouts_of_task(trajectory: Trajectory, limit: int = 50) -> QuerySet[Trajectory]:
    return (
        Trajectory.objects.filter(project_id=trajectory.project_id, task_key=trajectory.task_key)
        .exclude(pk=trajectory.pk)
        .only("id", "external_id", "success", "outcome_reward", "step_count", "model_name")
        .order_by("-success", "id")[:limit]
    )


def diff_steps(trajectory: Trajectory, *, with_labels: bool) -> list[DiffStep]:
    """The steps of one side, with text cut to the preview length, in two queries."""
    steps = list(
        Step.objects.filter(trajectory=trajectory)
        .annotate(preview=Left("content", STEP_PREVIEW_CHARS), length=Length("content"))
        .values_list(
            "pk",
            "index",
            "kind",
            "role",
            "agent",
            "preview",
            "length",
            "tool_name",
            "tool_args",
            "labelable",
            "prefix_hash",
        )
        .order_by("index")
    )
    labels: dict[int, list[tuple[str, int]]] = {}
    if with_labels:
        rows = (
            StepLabel.objects.filter(step__trajectory=trajectory, status="submitted")
            .order_by("annotator__username")
            .values_list("step_id", "annotator__username", "value")
        )
        for step_id, username, value in rows:
            labels.setdefault(step_id, []).append((username, value))
    return [DiffStep(*row, labels=labels.get(row[0], [])) for row in steps]


def first_errors(steps: list[DiffStep]) -> dict[str, int]:
    """Per label source (annotator), the index of the first step it labelled bad."""
    found: dict[str, int] = {}
    for step in steps:
        for username, value in step.labels:
            if value < 0 and username not in found:
                found[username] = step.index
    return found


def diff_context(left: list[DiffStep], right: list[DiffStep]) -> dict[str, object]:
    """What the page shows of two sides: the matching, the shared prefix's rows, the
    rows after it (kind, left step, right step) and each annotator's first errors."""
    result = rollout_matching.rollouts_match(_match_input(left), _match_input(right))
    left_errors = first_errors(left)
    right_errors = first_errors(right)
    return {
        "matching": result,
        "shared_rows": list(zip(left, right, strict=False))[: result.shared_prefix],
        "rows": [
            (
                row.kind,
                None if row.left is None else left[row.left],
                None if row.right is None else right[row.right],
            )
            for row in result.rows
            if row.kind != "shared"
        ],
        "first_errors": [
            (source, left_errors.get(source), right_errors.get(source))
            for source in sorted(set(left_errors) | set(right_errors))
        ],
    }


def _match_input(steps: list[DiffStep]) -> list[rollout_matching.MatchStep]:
    return [
        rollout_matching.MatchStep(
            s.index, s.prefix_hash, s.role, s.content, s.tool_name, s.tool_args
        )
        for s in steps
    ]
