"""Named read queries for rollouts. Lookups that start from a request go through a
``*_for_user`` helper, which raises 404 outside the user's projects."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django.db.models import Exists, F, Q, QuerySet
from django.http import Http404

from rollouts import demo_policy
from rollouts.models import (
    Continuation,
    DemoPolicyTraining,
    Policy,
    RolloutBranch,
    RolloutJob,
    StepMC,
)
from trajectories.models import Project, Step, Trajectory
from trajectories.selectors import AnyUser, can_manage_data, projects_for_user

RECENT_JOBS = 10
# Continuations listed under a step; the rest are a link to the trajectory list away.
STEP_CONTINUATIONS_SHOWN = 32


def can_run_rollouts(user: AnyUser, project: Project) -> bool:
    """Researchers and admins start and cancel rollouts, as they do scoring runs."""
    return can_manage_data(user, project)


def policies_for_project(project: Project) -> QuerySet[Policy]:
    """Policies a project may use: its own and the global ones. The toy demo policy is
    global so that the demo projects share one trained model, but it only knows their
    arithmetic: it is offered to the projects the demo trained it for, and no others."""
    demo_project = Exists(DemoPolicyTraining.objects.filter(project=project))
    return Policy.objects.filter(Q(project=project) | Q(project__isnull=True)).exclude(
        Q(project__isnull=True, name=demo_policy.POLICY_NAME) & ~Q(demo_project)
    )


def policies_usable_sql(project_column: str) -> tuple[str, list[Any]]:
    """:func:`policies_for_project` as an SQL condition over a project id column: whether
    the project has a policy to roll out with (the trajectory page's "roll out from here"
    shows only then)."""
    return (
        "EXISTS (SELECT 1 FROM rollouts_policy p"
        f" WHERE p.project_id = {project_column} OR (p.project_id IS NULL AND (p.name <> %s"
        " OR EXISTS (SELECT 1 FROM rollouts_demopolicytraining d"
        f" WHERE d.project_id = {project_column}))))",
        [demo_policy.POLICY_NAME],
    )


def policies_for_user(user: AnyUser) -> QuerySet[Policy]:
    return Policy.objects.filter(Q(project__in=projects_for_user(user)) | Q(project__isnull=True))


def policy_get_for_user(user: AnyUser, pk: int) -> Policy:
    policy = policies_for_user(user).filter(pk=pk).first() if user.is_authenticated else None
    if policy is None:
        raise Http404("No such policy.")
    return policy


def policy_by_name(project: Project, name: str) -> Policy | None:
    """The project's own policy called ``name``, else the global one."""
    return (
        policies_for_project(project)
        .filter(name=name)
        .order_by(F("project_id").desc(nulls_last=True))
        .first()
    )


def rollout_jobs_for_user(user: AnyUser) -> QuerySet[RolloutJob]:
    return RolloutJob.objects.filter(project__in=projects_for_user(user)).select_related(
        "project", "policy"
    )


def rollout_job_get_for_user(user: AnyUser, pk: int) -> RolloutJob:
    job = rollout_jobs_for_user(user).filter(pk=pk).first()
    if job is None:
        raise Http404("No such rollout job.")
    return job


def demo_policy_training_shown(project: Project) -> DemoPolicyTraining | None:
    """The project's demo policy training while it is queued or running, or when it
    failed; None once it is done (its rollout jobs then show instead)."""
    training = DemoPolicyTraining.objects.filter(project=project).first()
    if training is None or training.status == DemoPolicyTraining.Status.DONE:
        return None
    return training


def rollout_jobs_recent(project: Project, limit: int = RECENT_JOBS) -> list[RolloutJob]:
    return list(
        RolloutJob.objects.filter(project=project).select_related("policy").order_by("-id")[:limit]
    )


@dataclass(frozen=True)
class StepContinuation:
    trajectory_id: int
    sample: int
    success: bool
    finish_reason: str
    new_tokens: int
    last_step: str
    replaced: bool


@dataclass(frozen=True)
class StepRollouts:
    """What the rollouts panel under a step shows."""

    step: Step
    values: list[StepMC]  # per policy, newest first
    continuations: list[StepContinuation]
    continuation_count: int
    active_jobs: list[RolloutJob]


def step_rollouts(step: Step) -> StepRollouts:
    """Monte Carlo values of the step's prefix and the continuations branched from it
    (after it, or with it replaced), newest first, in four queries."""
    values = list(
        StepMC.objects.filter(step=step).select_related("policy").order_by("-updated_at", "-id")
    )
    branches = RolloutBranch.objects.filter(step=step)
    links = (
        Continuation.objects.filter(branch__in=branches)
        .select_related("branch")
        .order_by("-trajectory_id")
    )
    shown = list(links[:STEP_CONTINUATIONS_SHOWN])
    last_steps = dict(
        Step.objects.filter(trajectory_id__in=[c.trajectory_id for c in shown])
        .order_by("trajectory_id", "-index")
        .distinct("trajectory_id")
        .values_list("trajectory_id", "content")
    )
    continuations = [
        StepContinuation(
            trajectory_id=c.trajectory_id,
            sample=c.sample,
            success=c.success,
            finish_reason=c.finish_reason,
            new_tokens=c.new_tokens,
            last_step=last_steps.get(c.trajectory_id, "")[:300],
            replaced=c.branch.replaced,
        )
        for c in shown
    ]
    # A job not planned yet has no branches: its selection names the step.
    on_this_step = Q(branches__step=step) | Q(selection__step_ids__contains=[step.pk])
    active = list(RolloutJob.objects.filter(on_this_step, status__in=RolloutJob.ACTIVE).distinct())
    return StepRollouts(
        step=step,
        values=values,
        continuations=continuations,
        continuation_count=links.count() if len(shown) == STEP_CONTINUATIONS_SHOWN else len(shown),
        active_jobs=active,
    )


# --- Monte Carlo labels against a reference ------------------------------------------------


def _labels_by_trajectory(
    project: Project, source_text: str, trajectory_ids: list[int]
) -> dict[int, dict[int, int]]:
    """trajectory id → step index → label value, from a label source."""
    from django.db import connection

    from labeling.sources import label_source_parse, label_source_sql

    sql, params = label_source_sql(project, label_source_parse(source_text))
    out: dict[int, dict[int, int]] = {}
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT s.trajectory_id, s.index, r.value FROM ({sql}) r"
            " JOIN trajectories_step s ON s.id = r.step_id WHERE s.trajectory_id = ANY(%s)",
            [*params, trajectory_ids],
        )
        for trajectory_id, index, value in cursor.fetchall():
            out.setdefault(trajectory_id, {})[index] = int(value)
    return out


def _figure(value: float) -> float | None:
    """Rounded, and None where undefined (NaN is not JSON)."""
    return None if math.isnan(value) else round(value, 4)


def _first_bad(labels: dict[int, int]) -> int:
    return min((index for index, value in labels.items() if value < 0), default=-1)


def job_agreement(job: RolloutJob, *, against: str, mc: str = "") -> dict[str, object]:
    """How the job's Monte Carlo labels (``mc`` source text, default this job's policy's
    hard labels) agree with a reference label source on the job's trajectories: step
    accuracy and Cohen's κ where both label a step, and ProcessBench first-error
    accuracy and F1 (a search's first error, or the first step MC calls bad)."""
    from metrics import agreement

    # The trajectories the job labelled: searched, or holding a value it wrote (steps
    # that share a prefix share the value), its own continuations left out.
    labelled = (
        StepMC.objects.filter(job=job, step__trajectory__continuation__isnull=True)
        .values_list("step__trajectory_id", flat=True)
        .distinct()
    )
    trajectory_ids = sorted(
        set(labelled) | set(job.searches.values_list("trajectory_id", flat=True))
    )
    policy = job.policy.name if job.policy else ""
    reference = _labels_by_trajectory(job.project, against, trajectory_ids)
    predicted = _labels_by_trajectory(job.project, mc or f"mc:{policy}", trajectory_ids)
    pairs = [
        (value, predicted[t][index])
        for t, labels in reference.items()
        for index, value in labels.items()
        if index in predicted.get(t, {})
    ]
    result: dict[str, object] = {"against": against, "steps_compared": len(pairs)}
    if pairs:
        ref = [p[0] for p in pairs]
        pred = [p[1] for p in pairs]
        result["step_accuracy"] = _figure(agreement.accuracy(ref, pred))
        result["step_kappa"] = _figure(agreement.cohen_kappa(ref, pred))
    if job.mode == RolloutJob.Mode.SEARCH:
        found: dict[int, int] = {
            s.trajectory_id: s.first_error_index
            for s in job.searches.filter(first_error_index__isnull=False)
            if s.first_error_index is not None
        }
    else:
        labelable: dict[int, set[int]] = {}
        rows = Step.objects.filter(trajectory_id__in=trajectory_ids, labelable=True)
        for trajectory_id, index in rows.values_list("trajectory_id", "index"):
            labelable.setdefault(trajectory_id, set()).add(index)
        # Only trajectories whose every labelable step has a Monte Carlo label.
        found = {
            t: _first_bad(labels)
            for t, labels in predicted.items()
            if labelable.get(t, set()) <= set(labels)
        }
    common = [t for t in found if t in reference]
    if common:
        metrics = agreement.first_error_metrics(
            [found[t] for t in common], [_first_bad(reference[t]) for t in common]
        )
        result["first_error"] = {
            "trajectories": metrics.trajectories,
            "erroneous": metrics.erroneous,
            "acc_erroneous": _figure(metrics.acc_erroneous),
            "acc_correct": _figure(metrics.acc_correct),
            "f1": _figure(metrics.f1),
        }
    return result


@dataclass(frozen=True)
class PolicyMCStrip:
    """One policy's Monte Carlo values over a trajectory's steps (step id → soft value),
    with the ``k`` its continuations were counted over."""

    policy: str
    steps: list[Step]
    values: dict[int, float]
    counts: dict[int, str]  # step id → "successes/k"


def policy_mc_strips(trajectory: Trajectory) -> list[PolicyMCStrip]:
    """A strip per policy with values on the trajectory's steps, in policy name order."""
    steps = list(Step.objects.filter(trajectory=trajectory).only("id", "index").order_by("index"))
    by_policy: dict[str, PolicyMCStrip] = {}
    values = (
        StepMC.objects.filter(step__trajectory=trajectory)
        .select_related("policy")
        .order_by("policy__name", "step__index")
    )
    for value in values:
        strip = by_policy.setdefault(
            value.policy.name, PolicyMCStrip(value.policy.name, steps, {}, {})
        )
        strip.values[value.step_id] = value.soft
        strip.counts[value.step_id] = f"{value.successes}/{value.k}"
    return list(by_policy.values())
