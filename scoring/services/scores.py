"""Writes for PRM scores: scorers, scoring runs and their chunks (imported scores are
``imported.py``, head training ``training.py``, a judge's chunks ``judges.py``). What
differs by the scorer's kind comes from its declaration (``scoring.prm.kinds``) and its
runner (``runners.py``); nothing here names a kind.

The web, the API and the management commands call these; Celery tasks call the
``*_run``/``*_plan``/``*_score`` services that do the work on a worker. Only the services
enqueue tasks, always on commit. torch and transformers are imported lazily, inside the
functions that run on workers, so the web process never loads them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Unpack

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from labeling.models import Queue, QueueItem, Rubric
from labeling.services import queues_uncertainty_refresh
from scoring import prm
from scoring.models import Scorer, ScoringChunk, ScoringRun, StepScore
from scoring.prm.model_refs import ModelRefError
from scoring.references import (
    ReferenceFields,
    reference_check,
    reference_create,
    reference_values,
)
from scoring.selectors import latest_trained_head
from scoring.services.failure_attributions import failure_verdicts_write
from scoring.services.rubric_marks import judge_rubric_marks_write
from scoring.services.runners import (
    SKIPPED_LISTED,
    ChunkOutcome,
    RunRefused,
    RunStopped,
    ScoringError,
    kind_runner,
)
from stepscope.events import event_emit
from stepscope.jobs.lifecycle import chunk_claim, job_cancel, job_fail
from stepscope.jobs.retry import TRANSIENT_ERRORS
from stepscope.queueing import broker_require
from trajectories.models import Project, Step
from trajectories.selection import TrajectoryFilters, selection_definition, selection_parse
from trajectories.selectors import selection_check, trajectories_filtered

# --- Scorers -------------------------------------------------------------------------------


def scorer_create(
    *,
    kind: str,
    prompt: Mapping[str, Any] | None = None,
    **fields: Unpack[ReferenceFields],
) -> Scorer:
    """A scorer; its parameters are checked against the kind before it is saved. A kind
    with prompt versions (an llm-judge) gets its version 1 from ``prompt`` (``system``,
    ``template``; the mode's default text where left out) in the same transaction."""
    values = reference_values(fields)
    runner = kind_runner(kind)
    if prompt is not None and not prm.kind_get(kind).prompts:
        raise ScoringError("only an llm-judge has a prompt", field="prompt")
    scorer_check(
        kind=kind,
        model_ref=values["model_ref"],
        parameters=values["parameters"],
        queue=values["queue"],
        trust_remote_code=values["trust_remote_code"],
    )
    with transaction.atomic():
        scorer = reference_create(
            Scorer, {**values, "kind": kind}, unique=("name", "revision", "project")
        )
        if scorer is None:
            raise ScoringError(
                f"a scorer {values['name']!r} revision {values['revision']!r} exists already",
                field="name",
            )
        runner.created(scorer, prompt=prompt, user=values["created_by"])
    return scorer


def scorer_check(
    *,
    kind: str,
    model_ref: str,
    parameters: dict[str, Any],
    queue: str,
    trust_remote_code: bool = False,
) -> None:
    """Refuse a scorer that cannot run as configured (its kind's parameters), or whose
    model may not be loaded (``scoring.references.reference_check``, the check every
    model reference passes)."""
    try:
        spec = prm.kind_get(kind)
        params = spec.parameters(parameters)
        reference_check(
            model_ref=model_ref,
            queue=queue,
            trust_remote_code=trust_remote_code,
            needs_model=spec.needs_model,
            loads_locally=spec.loads(params),
        )
    except ModelRefError as error:
        raise ScoringError(str(error), field=error.field) from None
    except prm.ScorerError as error:
        raise ScoringError(str(error)) from None


# --- Scoring runs --------------------------------------------------------------------------


def scoring_run_start(
    *,
    project: Project,
    scorer: Scorer,
    user: User | None = None,
    only_unscored: bool = False,
    trajectory_ids: Iterable[int] | None = None,
    filters: TrajectoryFilters | None = None,
    queue: Queue | None = None,
    prompt_version: int | None = None,
    on_too_long: str | None = None,
    rubric: str | None = None,
) -> ScoringRun:
    """A run over the project's labelable steps (all, a filter, given trajectories, the
    trajectories of a labeling queue, or where these are combined, the steps all of them
    select), planned into chunks by a task on the default queue. A judge asks with
    ``prompt_version`` (its newest where None), which the run records, and does what
    ``on_too_long`` says with a prompt longer than its context: ``skip`` (the default:
    that step gets no verdict, the run lists it) or ``fail`` (the run fails). A judge in
    the rubric mode fills ``rubric`` (a name; the project's one current rubric where
    None), whose current version the run records."""
    if scorer.project_id not in (None, project.pk):
        raise ScoringError("that scorer belongs to another project")
    if queue is not None and queue.project_id != project.pk:
        raise ScoringError("that labeling queue belongs to another project")
    if not scorer.runs_a_model:
        raise ScoringError(
            f"{scorer.name} holds scores computed elsewhere; add to them with import_scores"
        )
    refusal = prm.kind_get(scorer.kind).run_check(scorer)
    if refusal:
        raise ScoringError(refusal)
    options = kind_runner(scorer.kind).run_options(
        scorer,
        project=project,
        prompt_version=prompt_version,
        on_too_long=on_too_long,
        rubric=rubric,
    )
    selection: dict[str, Any] = {"only_unscored": only_unscored}
    if trajectory_ids is not None:
        selection["trajectory_ids"] = sorted({int(pk) for pk in trajectory_ids})
    if filters is not None and not filters.is_empty():
        selection_check(project, filters)  # SelectionError names a scorer or run it lacks
        selection["filters"] = selection_definition(filters)
    if queue is not None:
        selection["queue"] = queue.pk
        selection["queue_name"] = queue.name
    broker_require()  # a dead broker is said now; no job is left queued
    with transaction.atomic():
        run = ScoringRun.objects.create(
            project=project,
            scorer=scorer,
            kind=ScoringRun.Kind.SCORE,
            selection=selection,
            created_by=user,
            prompt=options.prompt,
            metrics=options.metrics,
            parameters=options.parameters,
        )
        from scoring import tasks

        transaction.on_commit(lambda: tasks.plan_run.delay(run.pk))
    return run


def _selected_steps(run: ScoringRun) -> Iterator[tuple[int, int]]:
    """(trajectory id, step id) of every step the run covers, in trajectory order."""
    steps = Step.objects.filter(trajectory__project_id=run.project_id, labelable=True)
    selection = run.selection
    if "trajectory_ids" in selection:
        steps = steps.filter(trajectory_id__in=selection["trajectory_ids"])
    if "filters" in selection:
        filters = selection_parse(selection["filters"])
        steps = steps.filter(trajectory__in=trajectories_filtered(run.project, filters))
    if "queue" in selection:
        steps = steps.filter(
            Exists(
                QueueItem.objects.filter(
                    queue_id=selection["queue"], trajectory_id=OuterRef("trajectory_id")
                )
            )
        )
    assert run.scorer is not None  # a score run keeps its scorer
    judged = kind_runner(run.scorer.kind).judged(run)
    if selection.get("only_unscored") and judged is not None:
        # A judge answering per trajectory (a failure verdict, a rubric) has "scored" a
        # trajectory once it has its answer.
        steps = steps.exclude(Exists(judged.filter(trajectory_id=OuterRef("trajectory_id"))))
    elif selection.get("only_unscored"):
        scored = StepScore.objects.filter(step=OuterRef("pk"), scorer=run.scorer)
        steps = steps.exclude(Exists(scored))
    rows = steps.order_by("trajectory_id", "index").values_list("trajectory_id", "id")
    yield from rows.iterator(chunk_size=10_000)


def _group_into_chunks(
    rows: Iterator[tuple[int, int]], chunk_steps: int
) -> Iterator[tuple[list[int], list[int]]]:
    """Whole trajectories per chunk (one forward pass reads all of a trajectory's steps),
    closed once a chunk reaches ``chunk_steps`` steps."""
    trajectories: list[int] = []
    steps: list[int] = []
    for trajectory_id, step_id in rows:
        if not trajectories or trajectories[-1] != trajectory_id:
            if len(steps) >= chunk_steps:
                yield trajectories, steps
                trajectories, steps = [], []
            trajectories.append(trajectory_id)
        steps.append(step_id)
    if steps:
        yield trajectories, steps


def scoring_run_plan(*, run_id: int) -> None:
    """Split a queued run into chunks and enqueue them on the scorer's queue. Safe to
    redeliver: a planned run only has its unfinished chunks enqueued again."""
    with transaction.atomic():
        run = (
            ScoringRun.objects.select_for_update(of=("self",))
            .select_related("scorer")
            .get(pk=run_id)
        )
        if run.status not in ScoringRun.ACTIVE or run.scorer is None:
            return
        if not run.chunks.exists():
            chunk_steps = scorer_chunk_steps(run.scorer)
            chunks = [
                ScoringChunk(run=run, number=number, trajectory_ids=t, step_ids=s)
                for number, (t, s) in enumerate(
                    _group_into_chunks(_selected_steps(run), chunk_steps)
                )
            ]
            ScoringChunk.objects.bulk_create(chunks, batch_size=1000)
            run.total = sum(len(c.step_ids) for c in chunks)
            run.chunks_total = len(chunks)
            if not chunks:
                run.status = ScoringRun.Status.DONE
                run.started_at = run.finished_at = timezone.now()
            run.save(update_fields=["total", "chunks_total", "status", "started_at", "finished_at"])
            if run.status == ScoringRun.Status.DONE:
                scoring_run_announce(run)
        pending = list(
            run.chunks.filter(status=ScoringChunk.Status.PENDING).values_list("pk", flat=True)
        )
        queue = run.scorer.queue

        def enqueue() -> None:
            from scoring import tasks

            for chunk_id in pending:
                tasks.score_chunk.apply_async(args=[chunk_id], queue=queue)

        transaction.on_commit(enqueue)


def scoring_chunk_score(*, chunk_id: int) -> None:
    """Score one chunk on a worker and record it: the scores, the chunk and the run's
    progress change in one transaction, so a chunk redelivered after a worker died
    either finds its work done or does all of it."""
    chunk = ScoringChunk.objects.select_related("run__scorer").filter(pk=chunk_id).first()
    if chunk is None or chunk.status == ScoringChunk.Status.DONE:
        return
    run = chunk.run
    if run.status not in ScoringRun.ACTIVE or run.scorer is None:
        return
    if not chunk_claim(chunk, run):
        return
    try:
        outcome = kind_runner(run.scorer.kind).chunk(run, chunk)
    except TRANSIENT_ERRORS:
        raise
    except RunStopped:
        return
    except RunRefused as error:
        # A bad endpoint, key, model or prompt: said on the run; retrying cannot mend it.
        scoring_run_fail(run_id=run.pk, error=str(error))
        return
    except Exception as error:
        scoring_run_fail(run_id=run.pk, error=error)
        raise
    _chunk_finish(chunk, outcome)


def scorer_chunk_steps(scorer: Scorer) -> int:
    """Steps per chunk, from the scorer's parameters (every kind's have ``chunk_steps``)."""
    steps: int = prm.params_for_kind(scorer.kind, scorer.parameters).chunk_steps
    return steps


def _chunk_finish(chunk: ScoringChunk, outcome: ChunkOutcome) -> None:
    """Store the chunk's scores (and a failure-attribution judge's ``verdicts``) and count
    it done; ``cost`` (a judge's calls, tokens, parse failures) is added to the run's
    metrics in the same transaction, and so are the judge's ``skipped`` prompts (too
    long: ``skipped_count`` counts them all, ``skipped`` lists the first
    ``SKIPPED_LISTED``)."""
    results, cost, verdicts, skipped = (
        outcome.results,
        outcome.cost,
        outcome.verdicts,
        outcome.skipped,
    )
    now = timezone.now()
    with transaction.atomic():
        locked = ScoringChunk.objects.select_for_update().get(pk=chunk.pk)
        run = ScoringRun.objects.select_for_update().get(pk=chunk.run_id)
        if locked.status == ScoringChunk.Status.DONE or run.status not in ScoringRun.ACTIVE:
            return
        assert run.scorer_id is not None  # score runs always have their scorer
        scores_upsert(run=run, scorer_id=run.scorer_id, results=results)
        if verdicts:
            assert run.scorer is not None
            failure_verdicts_write(scorer=run.scorer, verdicts=verdicts)
        if outcome.rubric_marks:
            assert run.scorer is not None
            judge_rubric_marks_write(
                scorer=run.scorer,
                rubric=Rubric.objects.get(pk=run.parameters["rubric_id"]),
                marks=outcome.rubric_marks,
                run=run,
            )
        locked.status = ScoringChunk.Status.DONE
        locked.finished_at = now
        locked.save(update_fields=["status", "finished_at"])
        run.done += len(locked.step_ids)
        run.chunks_done += 1
        run.truncated += sum(1 for r in results if r.truncated)
        fields = ["done", "chunks_done", "truncated"]
        if cost or skipped:
            metrics = dict(run.metrics or {})
            for name, amount in (cost or {}).items():
                metrics[name] = int(metrics.get(name, 0)) + amount
            if skipped:
                listed = list(metrics.get("skipped") or [])
                metrics["skipped"] = (listed + skipped)[:SKIPPED_LISTED]
                metrics["skipped_count"] = int(metrics.get("skipped_count", 0)) + len(skipped)
            run.metrics = metrics
            fields.append("metrics")
        if run.chunks_done >= run.chunks_total:
            run.status = ScoringRun.Status.DONE
            run.finished_at = now
            seconds = (now - (run.started_at or run.created_at)).total_seconds()
            run.steps_per_second = run.done / seconds if seconds > 0 else None
            fields += ["status", "finished_at", "steps_per_second"]
        run.save(update_fields=fields)
        if run.status == ScoringRun.Status.DONE:
            scoring_run_announce(run)
        if run.status == ScoringRun.Status.DONE and _is_latest_head(run):
            # The "most uncertain first" queues follow the newest head's scores.
            queues_uncertainty_refresh(project=run.project)


def scoring_run_announce(run: ScoringRun) -> None:
    """A finished run's event (``judge_run.done`` for a judge's), in its commit."""
    assert run.scorer is not None
    judge = run.scorer.kind == prm.LLM_JUDGE
    event_emit(
        project_id=run.project_id,
        kind="judge_run.done" if judge else "scoring_run.done",
        data={
            "run": run.pk,
            "scorer": run.scorer.name,
            "steps": run.done,
            "selection": run.selection,
        },
    )


def _is_latest_head(run: ScoringRun) -> bool:
    latest = latest_trained_head(run.project)
    return latest is not None and latest.pk == run.scorer_id


def scores_upsert(*, run: ScoringRun, scorer_id: int, results: list[prm.StepResult]) -> int:
    """Insert or overwrite one score per (step, scorer); steps deleted meanwhile are
    skipped."""
    if not results:
        return 0
    existing = set(
        Step.objects.filter(pk__in=[r.key for r in results]).values_list("pk", flat=True)
    )
    rows = [
        StepScore(
            step_id=r.key,
            scorer_id=scorer_id,
            run=run,
            value=min(1.0, max(0.0, r.value)),
            raw=r.raw,
        )
        for r in results
        if r.key in existing
    ]
    StepScore.objects.bulk_create(
        rows,
        batch_size=2000,
        update_conflicts=True,
        unique_fields=["step", "scorer"],
        update_fields=["run", "value", "raw", "updated_at"],
    )
    return len(rows)


def scoring_run_fail(*, run_id: int, error: str | BaseException) -> None:
    job_fail(ScoringRun, pk=run_id, error=error)


def scoring_run_cancel(*, run: ScoringRun) -> ScoringRun:
    """Stop a queued or running run: chunks not yet finished are skipped. Scores already
    written stay."""
    return job_cancel(run)
