"""One chunk of a rollout job, on a worker: generate its continuations, check their
answers, and record everything (the continuations as trajectories, their links, the
branches' counts, Monte Carlo values, searches' next probes, the job's progress) in one
transaction with the chunk's status, so a chunk redelivered after its worker died either
finds its work done or does all of it.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.db import connection, transaction
from django.utils import timezone

from rollouts import answers, continuations, generation, monte_carlo
from rollouts.continuations import Parent
from rollouts.models import (
    Continuation,
    RolloutBranch,
    RolloutChunk,
    RolloutJob,
    RolloutSearch,
    StepMC,
)
from rollouts.services.jobs import (
    chunks_create,
    chunks_enqueue,
    job_finish_if_complete,
    rollout_job_fail,
    rollout_job_stop,
    search_stop,
)
from rollouts.services.parents import checked_trajectory, parents_load
from rollouts.services.policies import policy_spec
from stepscope.jobs.lifecycle import chunk_claim
from stepscope.jobs.retry import TRANSIENT_ERRORS
from trajectories.models import Step, Trajectory
from trajectories.services import parents_set, trajectory_import

if TYPE_CHECKING:
    from rollouts.generation.generator import PolicyGenerator

# A critical-step check without a given alternative samples this many candidate steps
# and takes the first that differs from the original.
ALTERNATIVE_SAMPLES = 4


@dataclass
class ChunkBranch:
    row: RolloutBranch
    parent: Parent
    first_sample: int
    samples: int
    alternative: str | None = None  # the replacement step, for a critical-step branch


@dataclass
class _Generated:
    records: list[dict[str, Any]] = field(default_factory=list)
    # Per branch id: [(sample, success, finish reason, new tokens, external id)].
    outcomes: dict[int, list[tuple[int, bool, str, int, str]]] = field(default_factory=dict)
    alternatives: dict[int, str] = field(default_factory=dict)
    tokens: int = 0
    truncated: int = 0


def rollout_chunk_run(*, chunk_id: int) -> None:
    """Generate and record one chunk (the Celery task's body)."""
    chunk = RolloutChunk.objects.select_related("job__policy").filter(pk=chunk_id).first()
    if chunk is None or chunk.status == RolloutChunk.Status.DONE:
        return
    job = chunk.job
    if job.status not in RolloutJob.ACTIVE or job.policy is None:
        return
    if not chunk_claim(chunk, job):
        return
    if job.max_tokens is not None and job.tokens >= job.max_tokens:
        rollout_job_stop(
            job_id=job.pk, reason=f"the token budget ran out ({job.tokens} of {job.max_tokens})"
        )
        return
    try:
        generated = _generate(job, chunk)
    except generation.Cancelled:
        return
    except TRANSIENT_ERRORS:
        raise
    except Exception as error:
        rollout_job_fail(job_id=job.pk, error=error)
        raise
    _chunk_finish(chunk, generated)


# --- Generating ----------------------------------------------------------------------------


def chunk_branches(chunk: RolloutChunk) -> list[ChunkBranch]:
    rows = {b.pk: b for b in RolloutBranch.objects.filter(pk__in=[item[0] for item in chunk.items])}
    parents = parents_load(b.trajectory_id for b in rows.values())
    out = []
    for branch_id, first, samples in chunk.items:
        row = rows[branch_id]
        out.append(
            ChunkBranch(
                row,
                parents[row.trajectory_id],
                first,
                samples,
                alternative=row.alternative if row.replaced and row.alternative else None,
            )
        )
    return out


def prefix_steps(branch: ChunkBranch) -> tuple[generation.PrefixStep, ...]:
    """The steps the policy continues: the stored steps up to the branch step, or up to
    the step before it and then the alternative."""
    index = branch.row.step_index
    kept = branch.parent.steps[: index if branch.row.replaced else index + 1]
    steps = [generation.PrefixStep(s.content, s.role, s.kind) for s in kept]
    if branch.row.replaced:
        original = branch.parent.steps[index]
        steps.append(generation.PrefixStep(branch.alternative or "", original.role, original.kind))
    return tuple(steps)


def _seed(job: RolloutJob, branch: RolloutBranch, salt: int = 0) -> int:
    return (job.pk * 1_000_003 + branch.pk * 7919 + salt) % (2**31)


def chunk_requests(job: RolloutJob, branches: list[ChunkBranch]) -> list[generation.Request]:
    """What the policy is asked for: each branch's prefix and its samples, seeded by job
    and branch so a chunk run again samples the same continuations."""
    return [
        generation.Request(
            key=b.row.pk,
            task=b.parent.task,
            steps=prefix_steps(b),
            samples=b.samples,
            first_sample=b.first_sample,
            seed=_seed(job, b.row),
        )
        for b in branches
    ]


def _generate(job: RolloutJob, chunk: RolloutChunk) -> _Generated:
    from rollouts.generation.generator import generator_load

    assert job.policy is not None
    branches = chunk_branches(chunk)
    generator = generator_load(policy_spec(job.policy))

    def should_stop() -> bool:
        status = RolloutJob.objects.filter(pk=job.pk).values_list("status", flat=True).first()
        return status not in RolloutJob.ACTIVE

    out = _Generated()
    for branch in branches:
        if branch.row.replaced and branch.alternative is None:
            branch.alternative = _sample_alternative(generator, job, branch, should_stop)
            out.alternatives[branch.row.pk] = branch.alternative
    requests = chunk_requests(job, branches)
    results = generator.generate(requests, should_stop=should_stop)
    check = answers.check_parse(job.answer_check)
    by_branch = {b.row.pk: b for b in branches}
    for result in results:
        branch = by_branch[result.key]
        kept = prefix_steps(branch)
        generated = tuple(text.replace("\x00", "") for text in result.steps)
        success = answers.check_answer(
            check,
            checked_trajectory(branch.parent),
            answers.CheckedContinuation(
                prefix_steps=tuple(answers.CheckedStep(s.content, s.role, s.kind) for s in kept),
                generated_steps=generated,
                text=result.text,
                finished=result.finished,
            ),
        )
        rollout = {
            "job": job.pk,
            "policy": job.policy.name,
            "sample": result.sample,
            "finish_reason": result.finish_reason,
            "new_tokens": result.new_tokens,
            "prompt_tokens": result.prompt_tokens,
            "dropped_tokens": result.dropped_tokens,
            "answer_check": job.answer_check,
        }
        record = continuations.continuation_record(
            parent=branch.parent,
            from_step=branch.row.step_index,
            generated=generated,
            finished=result.finished,
            success=success,
            model=job.policy.name,
            rollout=rollout,
            replacement=branch.alternative if branch.row.replaced else None,
        )
        out.records.append(record)
        out.outcomes.setdefault(branch.row.pk, []).append(
            (result.sample, success, result.finish_reason, result.new_tokens, record["id"])
        )
        out.tokens += result.new_tokens
        out.truncated += 1 if result.dropped_tokens else 0
    return out


def _sample_alternative(
    generator: PolicyGenerator,
    job: RolloutJob,
    branch: ChunkBranch,
    should_stop: Callable[[], bool],
) -> str:
    """A step the policy would take instead of the original: the first sampled step
    that differs from it (or the first sampled at all)."""
    index = branch.row.step_index
    before = tuple(
        generation.PrefixStep(s.content, s.role, s.kind) for s in branch.parent.steps[:index]
    )
    request = generation.Request(
        key=branch.row.pk,
        task=branch.parent.task,
        steps=before,
        samples=ALTERNATIVE_SAMPLES,
        seed=_seed(job, branch.row, salt=1),
    )
    original = branch.parent.steps[index].content.strip()
    candidates = [
        r.steps[0] for r in generator.generate([request], should_stop=should_stop) if r.steps
    ]
    different = [c for c in candidates if c.strip() != original]
    chosen = (different or candidates or [""])[0]
    return chosen.replace("\x00", "")


# --- Recording -----------------------------------------------------------------------------


def _chunk_finish(chunk: RolloutChunk, generated: _Generated) -> None:
    now = timezone.now()
    with transaction.atomic():
        locked = RolloutChunk.objects.select_for_update().get(pk=chunk.pk)
        job = (
            RolloutJob.objects.select_for_update(of=("self",))
            .select_related("policy")
            .get(pk=chunk.job_id)
        )
        if locked.status == RolloutChunk.Status.DONE or job.status not in RolloutJob.ACTIVE:
            return
        trajectory_ids = _continuations_import(job, generated)
        branches = {
            b.pk: b
            for b in RolloutBranch.objects.select_for_update(of=("self",))
            .select_related("step")
            .filter(pk__in=list(generated.outcomes))
        }
        links = []
        finished: list[RolloutBranch] = []
        for branch_id, outcomes in generated.outcomes.items():
            branch = branches[branch_id]
            for sample, success, finish, new_tokens, external_id in outcomes:
                links.append(
                    Continuation(
                        trajectory_id=trajectory_ids[external_id],
                        branch=branch,
                        sample=sample,
                        success=success,
                        finish_reason=finish,
                        new_tokens=new_tokens,
                    )
                )
            branch.done += len(outcomes)
            branch.successes += sum(1 for _, success, *_ in outcomes if success)
            if branch_id in generated.alternatives:
                branch.alternative = generated.alternatives[branch_id]
                branch.alternative_source = "policy"
            if branch.done >= branch.k:
                branch.status = RolloutBranch.Status.DONE
                finished.append(branch)
                if branch.replaced and branch.baseline_success is not None:
                    verdict = monte_carlo.CriticalVerdict(
                        baseline_success=branch.baseline_success,
                        alternative=monte_carlo.MCEstimate(branch.done, branch.successes),
                    )
                    branch.critical = verdict.critical
            branch.save()
        Continuation.objects.bulk_create(links)
        assert job.policy is not None
        mc_upsert(job=job, branches=[b for b in finished if not b.replaced])
        new_chunks = _searches_advance(job, [b for b in finished if b.search_id])

        locked.status = RolloutChunk.Status.DONE
        locked.finished_at = now
        locked.save(update_fields=["status", "finished_at"])
        job.done += sum(len(o) for o in generated.outcomes.values())
        job.successes += sum(1 for o in generated.outcomes.values() for _, s, *_ in o if s)
        job.tokens += generated.tokens
        job.truncated += generated.truncated
        job.chunks_done += 1
        job.save(
            update_fields=[
                "done",
                "successes",
                "tokens",
                "truncated",
                "chunks_done",
                "total",
                "chunks_total",
                "result",
            ]
        )
        chunks_enqueue(new_chunks, job.policy.queue)
        if job_finish_if_complete(job):
            return
        if job.max_tokens is not None and job.tokens >= job.max_tokens:
            job.result = {**job.result, "budget_stopped": True}
            job.save(update_fields=["result"])
            rollout_job_stop(
                job_id=job.pk,
                reason=f"the token budget ran out ({job.tokens} of {job.max_tokens})",
            )


def _continuations_import(job: RolloutJob, generated: _Generated) -> dict[str, int]:
    """Import the continuations through the ordinary import path (the ``rollout``
    format: Stepscope JSONL with branch links); return their ids by external id."""
    if not generated.records:
        return {}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"rollouts-job{job.pk}.jsonl"
        with path.open("w", encoding="utf-8") as out:
            for record in generated.records:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
        batch = trajectory_import(
            project=job.project,
            source_format=continuations.FORMAT,
            path=path,
            user=job.created_by,
            internal=True,
        )
    wanted = [r["id"] for r in generated.records]
    ids = dict(
        Trajectory.objects.filter(project_id=job.project_id, external_id__in=wanted)
        .order_by("pk")
        .values_list("external_id", "pk")
    )
    assert batch.created_count + batch.unchanged_count == len(wanted), batch.errors
    # The importer links a continuation to the newest trajectory with its parent's
    # external id; point it at the exact parent (ids are not unique, or may be blank).
    parents = [r["metadata"]["rollout"]["parent_id"] for r in generated.records]
    parents_set([(ids[e], parent) for e, parent in zip(wanted, parents, strict=True)])
    return ids


# The steps of the project that end the same prefix as the given steps. Such a step
# sits at the same index of a trajectory with the same task text (the hash chain starts
# from the task), so each distinct (task, index, hash) of the given steps is looked up
# through the (md5(task), project) index, and its steps through the (trajectory, index)
# unique index. Each probe is kept apart (OFFSET 0) and ``project_id + 0`` keeps the
# project indexes out: with statistics that lag a fresh import, the planner otherwise
# picked plans that hashed every task of the project once per given step.
SAME_PREFIX_SQL = """
    WITH given AS MATERIALIZED (
        SELECT DISTINCT md5(gt.task) AS task_digest, g.index, g.prefix_hash
        FROM trajectories_step AS g
        JOIN trajectories_trajectory AS gt ON gt.id = g.trajectory_id
        WHERE g.id = ANY(%s)
    )
    SELECT DISTINCT same_step.id, same_step.prefix_hash
    FROM given
    CROSS JOIN LATERAL (
        SELECT t.id FROM trajectories_trajectory AS t
        WHERE md5(t.task) = given.task_digest AND t.project_id + 0 = %s
        OFFSET 0
    ) AS same_task
    CROSS JOIN LATERAL (
        SELECT s.id, s.prefix_hash FROM trajectories_step AS s
        WHERE s.trajectory_id = same_task.id AND s.index = given.index
          AND s.prefix_hash = given.prefix_hash
        OFFSET 0
    ) AS same_step
"""


def mc_upsert(*, job: RolloutJob, branches: list[RolloutBranch]) -> int:
    """Write each finished branch's Monte Carlo value on every step of the project that
    ends the same prefix (same prefix hash): the continuations' own copies of it too."""
    if not branches or job.policy_id is None:
        return 0
    by_hash = {b.step.prefix_hash: monte_carlo.MCEstimate(b.done, b.successes) for b in branches}
    with connection.cursor() as cursor:
        cursor.execute(SAME_PREFIX_SQL, [[b.step_id for b in branches], job.project_id])
        steps = cursor.fetchall()
    rows = [
        StepMC(
            step_id=step_id,
            policy_id=job.policy_id,
            job=job,
            k=by_hash[h].k,
            successes=by_hash[h].successes,
            soft=by_hash[h].soft,
            hard=by_hash[h].hard,
        )
        for step_id, h in steps
    ]
    StepMC.objects.bulk_create(
        rows,
        batch_size=2000,
        update_conflicts=True,
        unique_fields=["step", "policy"],
        update_fields=["job", "k", "successes", "soft", "hard", "updated_at"],
    )
    return len(rows)


def _searches_advance(job: RolloutJob, probes: list[RolloutBranch]) -> list[int]:
    """Record each finished probe in its search; plan the next probe or close the
    search. Returns the ids of chunks created for next probes."""
    if not probes:
        return []
    searches = {
        s.pk: s
        for s in RolloutSearch.objects.select_for_update().filter(
            pk__in=[b.search_id for b in probes]
        )
    }
    planned = sum(RolloutBranch.objects.filter(job=job).values_list("k", flat=True))
    next_branches = []
    for probe in probes:
        found = searches[probe.search_id]  # type: ignore[index]
        if found.status != RolloutSearch.Status.SEARCHING:
            continue
        bound = found.state.get("bound", 0)
        state = monte_carlo.FirstErrorSearch.from_dict(found.state)
        state.record(probe.step_index, probe.successes, probe.done)
        found.state = {**state.to_dict(), "bound": bound}
        found.rollouts = state.rollouts
        step_index = state.next_probe()
        if step_index is None:
            found.status = RolloutSearch.Status.FOUND
            found.first_error_index = state.first_error
            job.total -= job.k * max(0, bound - len(state.probes))
        elif job.max_continuations is not None and planned + job.k > job.max_continuations:
            found.save()
            search_stop(found)
            job.total -= job.k * max(0, bound - len(state.probes))
            job.result = {**job.result, "budget_stopped": True}
            continue
        else:
            planned += job.k
            step_id = Step.objects.get(trajectory_id=found.trajectory_id, index=step_index).pk
            next_branches.append(
                RolloutBranch(
                    job=job,
                    trajectory_id=found.trajectory_id,
                    step_id=step_id,
                    step_index=step_index,
                    k=job.k,
                    search=found,
                )
            )
        found.save()
    if not next_branches:
        return []
    RolloutBranch.objects.bulk_create(next_branches)
    before = set(job.chunks.values_list("pk", flat=True))
    job.chunks_total += chunks_create(job, next_branches)
    return sorted(set(job.chunks.values_list("pk", flat=True)) - before)
