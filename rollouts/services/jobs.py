"""Rollout jobs: start one, plan it into branches and chunks (a task on the default
queue), cancel it, and close it when its last chunk is in.

A branch is one prefix continued k times. Planning dedupes branches by prefix hash
(two trajectories that share steps 0..t share their continuations' distribution, so one
branch serves both), respects the continuation budget exactly (whole branches only),
and packs branches into chunks of at most ``chunk_continuations`` continuations; only a
critical-step branch is never split, since its continuations share one sampled
alternative.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Count, QuerySet, Sum
from django.utils import timezone

from labeling.models import FinalLabel, StepLabel
from labeling.sources import label_source_parse
from rollouts import answers, generation, monte_carlo
from rollouts.models import (
    Policy,
    RolloutBranch,
    RolloutChunk,
    RolloutJob,
    RolloutSearch,
)
from rollouts.selectors import job_agreement
from rollouts.services.parents import parent_outcome, parents_load
from rollouts.services.policies import RolloutError
from stepscope.jobs.lifecycle import job_cancel, job_fail
from stepscope.queueing import broker_require
from trajectories.models import Project, Step, Trajectory
from trajectories.selection import TrajectoryFilters, selection_definition, selection_parse
from trajectories.selectors import selection_check, trajectories_filtered

MAX_K = 1024


# --- Starting ------------------------------------------------------------------------------


def rollout_job_start(
    *,
    project: Project,
    policy: Policy,
    k: int,
    mode: str = RolloutJob.Mode.STEPS,
    user: User | None = None,
    step_ids: Iterable[int] | None = None,
    trajectory_ids: Iterable[int] | None = None,
    filters: TrajectoryFilters | None = None,
    alternatives: dict[int, str] | None = None,
    answer_check: str = answers.DEFAULT_CHECK,
    max_continuations: int | None = None,
    max_tokens: int | None = None,
    chunk_continuations: int | None = None,
    against: str = "",
) -> RolloutJob:
    """A job continuing ``k`` times from each selected step, planned by a task on the
    default queue and generated on the policy's queue. With ``against`` (a label source,
    e.g. ``import:synthetic-truth``) the finished job records how its Monte Carlo labels
    agree with that source (``result["agreement"]``)."""
    if policy.project_id not in (None, project.pk):
        raise RolloutError("that policy belongs to another project")
    if mode not in RolloutJob.Mode.values:
        raise RolloutError(f"mode must be one of {', '.join(RolloutJob.Mode.values)}")
    if not 1 <= k <= MAX_K:
        raise RolloutError(f"k must be between 1 and {MAX_K}")
    try:
        check = answers.check_parse(answer_check)
        generation.policy_params(policy.parameters)
    except (answers.AnswerCheckError, generation.PolicyError) as error:
        raise RolloutError(str(error)) from None
    against = against.strip()
    if against:
        try:
            label_source_parse(against)
        except ValueError as error:
            raise RolloutError(f"against: {error}") from None
    for name, value in (
        ("max_continuations", max_continuations),
        ("max_tokens", max_tokens),
        ("chunk_continuations", chunk_continuations),
    ):
        if value is not None and value < 1:
            raise RolloutError(f"{name} must be at least 1")
    selection: dict[str, Any] = {}
    if step_ids is not None:
        wanted = sorted({int(pk) for pk in step_ids})
        found = Step.objects.filter(pk__in=wanted, trajectory__project=project).count()
        if found != len(wanted):
            raise RolloutError("some of those steps are not in this project")
        selection["step_ids"] = wanted
    elif mode in (RolloutJob.Mode.STEPS, RolloutJob.Mode.CRITICAL):
        raise RolloutError(f"a {mode} job needs the steps to start from")
    if trajectory_ids is not None:
        selection["trajectory_ids"] = sorted({int(pk) for pk in trajectory_ids})
    if filters is not None and not filters.is_empty():
        selection_check(project, filters)  # SelectionError names a scorer or run it lacks
        selection["filters"] = selection_definition(filters)
    if alternatives:
        selection["alternatives"] = {str(pk): text for pk, text in alternatives.items()}
    options: dict[str, Any] = {}
    if chunk_continuations:
        options["chunk_continuations"] = chunk_continuations
    if against:
        options["against"] = against
    broker_require()  # a dead broker is said now; no job is left queued
    with transaction.atomic():
        job = RolloutJob.objects.create(
            project=project,
            policy=policy,
            mode=mode,
            k=k,
            answer_check=str(check),
            selection=selection,
            options=options,
            max_continuations=max_continuations,
            max_tokens=max_tokens,
            created_by=user,
        )
        from rollouts import tasks

        transaction.on_commit(lambda: tasks.plan_job.delay(job.pk))
    return job


# --- Planning ------------------------------------------------------------------------------


@dataclasses.dataclass
class _Plan:
    """Branches to create, in order, and what the budget left out."""

    branches: list[RolloutBranch] = dataclasses.field(default_factory=list)
    left_out: int = 0


def rollout_job_plan(*, job_id: int) -> None:
    """Split a queued job into branches and chunks and enqueue the chunks on the
    policy's queue. Safe to redeliver: a planned job only has its unfinished chunks
    enqueued again."""
    with transaction.atomic():
        job = (
            RolloutJob.objects.select_for_update(of=("self",))
            .select_related("policy")
            .get(pk=job_id)
        )
        if job.status not in RolloutJob.ACTIVE or job.policy is None:
            return
        if not job.chunks.exists() and not job.branches.exists():
            _plan(job)
        pending = list(
            job.chunks.filter(status=RolloutChunk.Status.PENDING).values_list("pk", flat=True)
        )
        chunks_enqueue(pending, job.policy.queue)
        job_finish_if_complete(job)


def chunks_enqueue(chunk_ids: list[int], queue: str) -> None:
    from rollouts import tasks

    if chunk_ids:
        transaction.on_commit(
            lambda: [tasks.run_chunk.apply_async(args=[pk], queue=queue) for pk in chunk_ids]
        )


def _plan(job: RolloutJob) -> None:
    check = answers.check_parse(job.answer_check)
    if job.mode == RolloutJob.Mode.SEARCH:
        plan = _plan_searches(job, check)
    elif job.mode == RolloutJob.Mode.CRITICAL:
        plan = _plan_critical(job, check)
    else:
        plan = _plan_steps(job, _steps_to_continue(job))
    RolloutBranch.objects.bulk_create(plan.branches, batch_size=1000)
    chunk_count = chunks_create(job, plan.branches)
    job.total += sum(b.k for b in plan.branches)
    job.chunks_total += chunk_count
    if plan.left_out:
        job.result["budget_left_out_branches"] = plan.left_out
        job.result["budget_stopped"] = True
    job.save(update_fields=["total", "chunks_total", "result"])


def _selected_trajectories(job: RolloutJob) -> QuerySet[Trajectory]:
    selection = job.selection
    trajectories = Trajectory.objects.filter(project_id=job.project_id)
    if "trajectory_ids" in selection:
        trajectories = trajectories.filter(pk__in=selection["trajectory_ids"])
    else:
        # Continuations of earlier jobs are not rolled out again unless asked for by id.
        trajectories = trajectories.filter(continuation__isnull=True)
    if "filters" in selection:
        filters = selection_parse(selection["filters"])
        trajectories = trajectories.filter(pk__in=trajectories_filtered(job.project, filters))
    return trajectories


def _steps_to_continue(job: RolloutJob) -> QuerySet[Step]:
    if "step_ids" in job.selection:
        return Step.objects.filter(pk__in=job.selection["step_ids"])
    return Step.objects.filter(trajectory__in=_selected_trajectories(job), labelable=True)


def _budget_left(job: RolloutJob, planned: int) -> int | None:
    if job.max_continuations is None:
        return None
    return job.max_continuations - planned


def _plan_steps(job: RolloutJob, steps: QuerySet[Step]) -> _Plan:
    """One branch per distinct prefix among ``steps``, in trajectory order."""
    plan = _Plan()
    seen: set[str] = set()
    planned = 0
    rows = steps.order_by("trajectory_id", "index").values_list(
        "trajectory_id", "pk", "index", "prefix_hash"
    )
    for trajectory_id, step_id, index, prefix_hash in rows.iterator(chunk_size=10_000):
        if prefix_hash in seen:
            continue
        seen.add(prefix_hash)
        left = _budget_left(job, planned)
        if left is not None and left < job.k:
            plan.left_out += 1
            continue
        planned += job.k
        plan.branches.append(
            RolloutBranch(
                job=job, trajectory_id=trajectory_id, step_id=step_id, step_index=index, k=job.k
            )
        )
    return plan


def _plan_searches(job: RolloutJob, check: answers.AnswerCheck) -> _Plan:
    """A search per selected trajectory that failed, and its first probe."""
    plan = _Plan()
    trajectories = list(_selected_trajectories(job).order_by("pk").values_list("pk", "success"))
    parents = parents_load(pk for pk, _ in trajectories)
    labelable: dict[int, list[tuple[int, int]]] = {}
    rows = (
        Step.objects.filter(trajectory_id__in=list(parents), labelable=True)
        .order_by("trajectory_id", "index")
        .values_list("trajectory_id", "index", "pk")
    )
    for trajectory_id, index, step_id in rows.iterator(chunk_size=10_000):
        labelable.setdefault(trajectory_id, []).append((index, step_id))
    planned = 0
    for trajectory_id, stored_success in trajectories:
        steps = labelable.get(trajectory_id, [])
        state = monte_carlo.FirstErrorSearch(candidates=[index for index, _ in steps])
        found = RolloutSearch(job=job, trajectory_id=trajectory_id, state=state.to_dict())
        outcome = parent_outcome(parents[trajectory_id], stored_success, check)
        if outcome is None:
            found.status, found.note = RolloutSearch.Status.SKIPPED, "no ground truth to check"
        elif outcome:
            found.status, found.first_error_index = RolloutSearch.Status.NO_ERROR, -1
            found.note = "the trajectory succeeded"
        elif not steps:
            found.status, found.note = RolloutSearch.Status.SKIPPED, "no labelable step"
        elif state.finished:
            # One candidate: the failed outcome already says it is the error.
            found.status, found.first_error_index = RolloutSearch.Status.FOUND, state.first_error
        found.save()
        if found.status != RolloutSearch.Status.SEARCHING:
            continue
        bound = monte_carlo.search_probes_bound(len(state.candidates))
        left = _budget_left(job, planned)
        if left is not None and left < job.k:
            search_stop(found)
            plan.left_out += 1
            continue
        planned += job.k
        job.total += job.k * (bound - 1)  # the later probes, at most
        found.state = {**state.to_dict(), "bound": bound}
        found.save(update_fields=["state"])
        probe = state.next_probe()
        assert probe is not None
        plan.branches.append(
            RolloutBranch(
                job=job,
                trajectory_id=trajectory_id,
                step_id=dict(steps)[probe],
                step_index=probe,
                k=job.k,
                search=found,
            )
        )
    return plan


def _plan_critical(job: RolloutJob, check: answers.AnswerCheck) -> _Plan:
    """A branch per given step, with the step replaced: by the text the job was given,
    else the newest correction an annotator or adjudicator wrote, else (empty here) a
    policy sample drawn by the chunk."""
    plan = _Plan()
    steps = list(
        Step.objects.filter(pk__in=job.selection["step_ids"])
        .order_by("trajectory_id", "index")
        .values_list("pk", "trajectory_id", "index", "trajectory__success")
    )
    parents = parents_load(trajectory_id for _, trajectory_id, _, _ in steps)
    given = {int(pk): text for pk, text in job.selection.get("alternatives", {}).items()}
    corrections = _corrections([pk for pk, *_ in steps])
    planned = 0
    for step_id, trajectory_id, index, stored_success in steps:
        left = _budget_left(job, planned)
        if left is not None and left < job.k:
            plan.left_out += 1
            continue
        planned += job.k
        if given.get(step_id, "").strip():
            alternative, source = given[step_id], "given"
        elif step_id in corrections:
            alternative, source = corrections[step_id], "annotator"
        else:
            alternative, source = "", ""
        plan.branches.append(
            RolloutBranch(
                job=job,
                trajectory_id=trajectory_id,
                step_id=step_id,
                step_index=index,
                k=job.k,
                replaced=True,
                alternative=alternative,
                alternative_source=source,
                baseline_success=parent_outcome(parents[trajectory_id], stored_success, check),
            )
        )
    return plan


def _corrections(step_ids: list[int]) -> dict[int, str]:
    """The correction to use per step: an adjudicator's, else the newest annotator's."""
    out: dict[int, str] = {}
    submitted = StepLabel.objects.filter(
        step_id__in=step_ids, status=StepLabel.Status.SUBMITTED
    ).exclude(correction="")
    for step_id, text in submitted.order_by("updated_at").values_list("step_id", "correction"):
        out[step_id] = text
    finals = FinalLabel.objects.filter(step_id__in=step_ids).exclude(correction="")
    for step_id, text in finals.values_list("step_id", "correction"):
        out[step_id] = text
    return out


def chunks_create(job: RolloutJob, branches: list[RolloutBranch]) -> int:
    """Pack the branches' continuations into new chunks numbered after the job's last;
    returns how many. Call with the job locked."""
    size = job.options.get("chunk_continuations") or (
        generation.policy_params(job.policy.parameters if job.policy else {}).chunk_continuations
    )
    pieces: list[list[list[int]]] = []
    current: list[list[int]] = []
    room = size
    for branch in branches:
        assert branch.pk is not None
        if branch.replaced:
            if current and branch.k > room:
                pieces.append(current)
                current, room = [], size
            current.append([branch.pk, 0, branch.k])
            room -= branch.k
        else:
            first = 0
            while first < branch.k:
                take = min(room, branch.k - first)
                current.append([branch.pk, first, take])
                first += take
                room -= take
                if room <= 0:
                    pieces.append(current)
                    current, room = [], size
        if room <= 0:
            pieces.append(current)
            current, room = [], size
    if current:
        pieces.append(current)
    last = job.chunks.order_by("-number").values_list("number", flat=True).first()
    start = 0 if last is None else last + 1
    RolloutChunk.objects.bulk_create(
        [RolloutChunk(job=job, number=start + n, items=items) for n, items in enumerate(pieces)]
    )
    return len(pieces)


# --- Searches ------------------------------------------------------------------------------


def search_stop(found: RolloutSearch) -> None:
    found.status = RolloutSearch.Status.STOPPED
    found.note = "the job's continuation budget ran out"
    found.save(update_fields=["status", "note"])


# --- Ending --------------------------------------------------------------------------------


def job_finish_if_complete(job: RolloutJob) -> bool:
    """Close the job once every chunk is in and no search waits for a probe. Call with
    the job locked; saves it."""
    if job.status not in RolloutJob.ACTIVE or job.chunks_done < job.chunks_total:
        return False
    if job.searches.filter(status=RolloutSearch.Status.SEARCHING).exists():
        return False
    now = timezone.now()
    stopped = job.result.get("budget_stopped")
    job.status = RolloutJob.Status.STOPPED if stopped else RolloutJob.Status.DONE
    if stopped and not job.error:
        job.error = "the continuation budget ran out before every branch was rolled out"
    job.finished_at = now
    job.result = {**job.result, **job_summary(job)}
    if job.options.get("against"):
        job.result["agreement"] = _agreement(job)
    _rates(job, now)
    job.save()
    return True


def _agreement(job: RolloutJob) -> dict[str, object]:
    """How the job's MC labels agree with the label source it was started against; a
    source that no longer resolves (a renamed scorer) is noted, not fatal."""
    against = job.options["against"]
    try:
        return job_agreement(job, against=against)
    except ValueError as error:
        return {"against": against, "error": str(error)}


def _rates(job: RolloutJob, now: Any) -> None:
    seconds = (now - (job.started_at or job.created_at)).total_seconds()
    job.continuations_per_second = job.done / seconds if seconds > 0 and job.done else None
    job.tokens_per_second = job.tokens / seconds if seconds > 0 and job.tokens else None


def job_summary(job: RolloutJob) -> dict[str, Any]:
    """What the job found, for its row, the API and the command's summary line."""
    summary: dict[str, Any] = {}
    if job.mode == RolloutJob.Mode.SEARCH:
        counts = dict(job.searches.values_list("status").annotate(n=Count("id")))
        summary["searches"] = {
            status.replace("-", "_"): counts.get(status, 0) for status in RolloutSearch.Status
        }
        summary["search_rollouts"] = job.searches.aggregate(n=Sum("rollouts"))["n"] or 0
    if job.mode == RolloutJob.Mode.CRITICAL:
        branches = job.branches.filter(replaced=True)
        summary["critical_steps"] = list(
            branches.filter(critical=True).order_by("step_id").values_list("step_id", flat=True)
        )
        summary["checked_steps"] = branches.filter(critical__isnull=False).count()
    summary["branches"] = job.branches.count()
    summary["branches_succeeding"] = job.branches.filter(
        status=RolloutBranch.Status.DONE, successes__gt=0
    ).count()
    return summary


def rollout_job_fail(*, job_id: int, error: str | BaseException) -> None:
    job_fail(RolloutJob, pk=job_id, error=error)


def rollout_job_stop(*, job_id: int, reason: str) -> None:
    """End the job because a budget ran out: chunks not yet finished are skipped; what
    is written stays."""
    with transaction.atomic():
        stopped = RolloutJob.objects.filter(pk=job_id, status__in=RolloutJob.ACTIVE).update(
            status=RolloutJob.Status.STOPPED, error=reason[:4000], finished_at=timezone.now()
        )
        if stopped:
            RolloutSearch.objects.filter(
                job_id=job_id, status=RolloutSearch.Status.SEARCHING
            ).update(status=RolloutSearch.Status.STOPPED, note=reason[:300])


def rollout_job_cancel(*, job: RolloutJob) -> RolloutJob:
    """Stop a queued or running job: chunks not yet finished are skipped (a chunk being
    generated stops at its next batch). Continuations already written stay."""
    return job_cancel(job)
