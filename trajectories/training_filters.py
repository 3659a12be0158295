"""The trajectory list's filters and columns on RL training facts (policy version,
training step, advantage), registered with the list's filter and column registries; the
one that compares advantages with human labels is labeling's (``labeling/filters.py``).

A policy version is text (``"7"``, ``"global_step_12"``); a range ``A..B`` (either end
may be left out) compares the number it ends with, so ``3..7`` finds ``"5"`` and
``"global_step_5"`` alike."""

from __future__ import annotations

from typing import Any

from django.db.models import Avg, Exists, F, FloatField, IntegerField, OuterRef, Q, Subquery
from django.db.models.expressions import RawSQL

from trajectories.columns import ListColumn, trajectory_column_register
from trajectories.models import Project, Step, Trajectory
from trajectories.selection import TrajectoryFilters, policy_version_parse
from trajectories.selectors import trajectory_filter_register


@trajectory_filter_register("policy_version")
def policy_version_condition(project: Project, filters: TrajectoryFilters) -> Q | None:
    parsed = policy_version_parse(filters.policy_version)
    if parsed is None:
        return None
    if isinstance(parsed, str):
        return Q(policy_version=parsed)
    number = RawSQL(
        "substring(trajectories_trajectory.policy_version from '(-?[0-9]{1,9})$')::int",
        [],
        output_field=IntegerField(),
    )
    condition = Q()
    if parsed.low is not None:
        condition &= Q(_version_number__gte=parsed.low)
    if parsed.high is not None:
        condition &= Q(_version_number__lte=parsed.high)
    ids = (
        Trajectory.objects.filter(project=project)
        .exclude(policy_version="")
        .annotate(_version_number=number)
        .filter(condition)
        .values("pk")
    )
    return Q(pk__in=ids)


@trajectory_filter_register("advantage")
def advantage_condition(project: Project, filters: TrajectoryFilters) -> Q | None:
    """Some step's advantage lies in the range."""
    if filters.min_advantage is None and filters.max_advantage is None:
        return None
    steps = Step.objects.filter(trajectory=OuterRef("pk"), advantage__isnull=False)
    if filters.min_advantage is not None:
        steps = steps.filter(advantage__gte=filters.min_advantage)
    if filters.max_advantage is not None:
        steps = steps.filter(advantage__lte=filters.max_advantage)
    return Q(Exists(steps))


def _policy_annotations(project: Project) -> dict[str, Any]:
    return {"list_policy": F("policy_version"), "list_training_step": F("training_step")}


def _policy_cell(row: Trajectory) -> str:
    version = getattr(row, "list_policy", "")
    step = getattr(row, "list_training_step", None)
    parts = [version] if version else []
    if step is not None:
        parts.append(f"step {step}")
    return " · ".join(parts) or "—"


def _advantage_annotations(project: Project) -> dict[str, Any]:
    mean = (
        Step.objects.filter(trajectory=OuterRef("pk"), advantage__isnull=False)
        .order_by()
        .values("trajectory")
        .annotate(mean=Avg("advantage"))
        .values("mean")
    )
    return {"list_advantage": Subquery(mean, output_field=FloatField())}


def _advantage_cell(row: Trajectory) -> str:
    value = getattr(row, "list_advantage", None)
    return "—" if value is None else f"{value:+.3f}"


trajectory_column_register(
    ListColumn(
        name="policy",
        header="Policy",
        annotations=_policy_annotations,
        cell=_policy_cell,
        help="The RL policy version that wrote the rollout and the trainer's step",
        # Versions are text ("global_step_12"); the trainer's step orders them.
        sort="list_training_step",
    )
)
trajectory_column_register(
    ListColumn(
        name="advantage",
        header="Adv.",
        annotations=_advantage_annotations,
        cell=_advantage_cell,
        numeric=True,
        help="The mean advantage of the steps that have one",
        sort="list_advantage",
    )
)
