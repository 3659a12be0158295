"""Writes for credit attribution: runs, their chunks, and the step credits they store.

A run is planned into chunks by a task on the ``default`` queue. A CPU method (see
:mod:`scoring.methods`) is one chunk on ``default`` that reads every selected step with a
binary ``COPY``, computes all credits as whole arrays and writes them back with a binary
``COPY``, replacing the run's old credits in the same transaction. A model method
(leave-one-out, Shapley, token saliency) is chunks of whole trajectories on the scorer's
queue; each chunk upserts its credits, marks itself done and counts its progress in one
transaction, so a chunk redelivered after its worker died either finds its work done or
does all of it.

Running the same method with the same parameters, inputs and selection again reuses the
run (``AttributionRun.key`` is unique per project): its credits are replaced, never
duplicated.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable
from typing import Any

import numpy as np
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, QuerySet
from django.utils import timezone

from labeling.sources import IMPORTED_PREFIX, label_source_parse, label_source_sql
from scoring import copyio, methods, prm
from scoring.models import AttributionChunk, AttributionRun, Scorer, StepCredit
from scoring.services.runners import ScoringError, scorer_spec
from stepscope.jobs.lifecycle import chunk_claim, job_cancel, job_fail
from stepscope.jobs.retry import TRANSIENT_ERRORS
from stepscope.queueing import broker_require
from trajectories.models import Project, Step, Trajectory
from trajectories.selection import TrajectoryFilters, selection_definition, selection_parse
from trajectories.selectors import selection_check, trajectories_filtered

# A model chunk holds whole trajectories until its players (labelable steps) reach the
# scorer's ``chunk_steps`` divided by this: every player costs a forward pass for
# leave-one-out and one per permutation for Shapley, where scoring costs one per step.
MODEL_CHUNK_DIVISOR = 8
# Bytes per write of a binary COPY.
COPY_PIECE = 1 << 22


class AttributionError(ScoringError):
    """A request the attribution services refuse, with a message for the user."""


# --- Starting a run ------------------------------------------------------------------------


def _run_key(
    method: str,
    parameters: dict[str, Any],
    scorer: Scorer | None,
    label_source: str,
    selection: dict[str, Any],
) -> str:
    payload = json.dumps(
        [method, parameters, scorer.pk if scorer else None, label_source, selection],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def _checked_inputs(
    *,
    project: Project,
    spec: methods.MethodSpec,
    parameters: dict[str, Any],
    scorer: Scorer | None,
    label_source: str,
) -> str:
    """Check the scorer and label source a method needs; return the label source in its
    canonical spelling."""
    needs_scorer = spec.scorer == "required" or (
        spec.name == "first-error" and parameters["source"] == "prm"
    )
    uses_scorer = spec.scorer != "" and not (
        spec.name == "first-error" and parameters["source"] == "mc"
    )
    if needs_scorer and scorer is None:
        raise AttributionError(f"{spec.name} needs a scorer (--scorer)")
    if scorer is not None and not uses_scorer:
        raise AttributionError(f"{spec.name} does not use a scorer")
    if scorer is not None and scorer.project_id not in (None, project.pk):
        raise AttributionError("that scorer belongs to another project")
    if spec.model and scorer is not None and not scorer.runs_a_model:
        raise AttributionError(f"{scorer.name} has no model to run; {spec.name} needs one")
    if spec.model and scorer is not None:
        # The value function is the scorer's StepScorer (a judge has none).
        kind = prm.kind_get(scorer.kind)
        if not kind.build:
            raise AttributionError(
                f"{scorer.name} is an {kind.name}; {spec.name} needs a PRM to use as a value"
                " function"
            )
        if refusal := kind.run_check(scorer):
            raise AttributionError(refusal)
    if not label_source:
        return ""
    if not spec.labels:
        raise AttributionError(f"{spec.name} does not take step rewards from labels")
    try:
        source = label_source_parse(label_source, scorer=scorer.name if scorer else "")
        label_source_sql(project, source)  # a model source's scorer must exist
    except ValueError as error:
        raise AttributionError(str(error)) from None
    if source.kind in ("human", "import") and source.name not in ("majority", "adjudicated"):
        username = source.name if source.kind == "human" else IMPORTED_PREFIX + source.name
        if not User.objects.filter(username=username).exists():
            raise AttributionError(f"no annotator {username!r}: {source} has no labels")
    return label_source.strip()


def attribution_run_start(
    *,
    project: Project,
    method: str,
    scorer: Scorer | None = None,
    label_source: str = "",
    parameters: dict[str, Any] | None = None,
    trajectory_ids: Iterable[int] | None = None,
    filters: TrajectoryFilters | None = None,
    step: Step | None = None,
    user: User | None = None,
) -> AttributionRun:
    """A run of ``method`` over the project's labelable steps (all, a filter, or given
    trajectories), or over one ``step`` for token saliency; planned by a task on commit.

    The same method, parameters, inputs and selection again give the same run back:
    still running, as it is; finished, reset and run again, its credits replaced."""
    try:
        normalised = methods.parameters_normalise(method, parameters)
    except ValueError as error:
        raise AttributionError(str(error)) from None
    spec = methods.METHODS[method]
    label_source = _checked_inputs(
        project=project,
        spec=spec,
        parameters=normalised,
        scorer=scorer,
        label_source=label_source,
    )
    selection: dict[str, Any] = {}
    if method == AttributionRun.Method.TOKEN_SALIENCY:
        if step is None:
            raise AttributionError("token saliency is for one step: name it")
        if step.trajectory.project_id != project.pk:
            raise AttributionError("that step belongs to another project")
        if not step.labelable:
            raise AttributionError("only labelable steps are scored")
        selection["step"] = step.pk
    elif step is not None:
        raise AttributionError(f"{method} runs over trajectories, not one step")
    if trajectory_ids is not None:
        selection["trajectory_ids"] = sorted({int(pk) for pk in trajectory_ids})
    if filters is not None and not filters.is_empty():
        selection_check(project, filters)  # SelectionError names a scorer or run it lacks
        selection["filters"] = selection_definition(filters)
    key = _run_key(method, normalised, scorer, label_source, selection)
    fields = {
        "method": method,
        "parameters": normalised,
        "scorer": scorer,
        "scorer_revision": scorer.revision if scorer else "",
        "label_source": label_source,
        "selection": selection,
    }
    broker_require()  # a dead broker is said now; no job is left queued
    for _ in range(2):
        try:
            with transaction.atomic():
                run = _start_or_restart(project, key, fields, user)
            return run
        except IntegrityError:
            continue  # another request created the same run meanwhile: take that one
    raise AttributionError("could not start the run; try again")


def _start_or_restart(
    project: Project, key: str, fields: dict[str, Any], user: User | None
) -> AttributionRun:
    run = AttributionRun.objects.select_for_update().filter(project=project, key=key).first()
    if run is not None and run.is_active:
        return run
    if run is None:
        run = AttributionRun.objects.create(project=project, key=key, created_by=user, **fields)
    else:
        run.chunks.all().delete()
        run.status = AttributionRun.Status.QUEUED
        run.total = run.done = run.chunks_total = run.chunks_done = 0
        run.steps_per_second = None
        run.metrics = {}
        run.error = ""
        run.started_at = run.finished_at = None
        run.created_at = timezone.now()
        run.created_by = user or run.created_by
        run.save()
    run_id = run.pk
    from scoring import tasks

    transaction.on_commit(
        lambda: tasks.attribution_plan.apply_async(args=[run_id], queue="default")
    )
    return run


# --- Planning ------------------------------------------------------------------------------


def _trajectory_queryset(run: AttributionRun) -> QuerySet[Trajectory]:
    trajectories = Trajectory.objects.filter(project_id=run.project_id)
    selection = run.selection
    if "trajectory_ids" in selection:
        trajectories = trajectories.filter(pk__in=selection["trajectory_ids"])
    if "filters" in selection:
        filters = selection_parse(selection["filters"])
        trajectories = trajectories.filter(pk__in=trajectories_filtered(run.project, filters))
    return trajectories


def _selected_steps(run: AttributionRun) -> QuerySet[Step]:
    return Step.objects.filter(trajectory__in=_trajectory_queryset(run), labelable=True)


def _model_chunks(run: AttributionRun) -> list[AttributionChunk]:
    assert run.scorer is not None  # model methods always have their scorer
    if run.method == AttributionRun.Method.TOKEN_SALIENCY:
        step = Step.objects.filter(pk=run.selection["step"]).values("trajectory_id").first()
        if step is None:
            return []
        return [
            AttributionChunk(run=run, number=0, trajectory_ids=[step["trajectory_id"]], steps=1)
        ]
    params = prm.params_for_kind(run.scorer.kind, run.scorer.parameters)
    per_chunk = max(1, params.chunk_steps // MODEL_CHUNK_DIVISOR)
    counts = (
        _selected_steps(run)
        .values("trajectory_id")
        .annotate(n=Count("id"))
        .order_by("trajectory_id")
        .values_list("trajectory_id", "n")
    )
    chunks: list[AttributionChunk] = []
    ids: list[int] = []
    players = 0
    for trajectory_id, n in counts.iterator(chunk_size=10_000):
        ids.append(trajectory_id)
        players += n
        if players >= per_chunk:
            chunks.append(
                AttributionChunk(run=run, number=len(chunks), trajectory_ids=ids, steps=players)
            )
            ids, players = [], 0
    if ids:
        chunks.append(
            AttributionChunk(run=run, number=len(chunks), trajectory_ids=ids, steps=players)
        )
    return chunks


def attribution_run_plan(*, run_id: int) -> None:
    """Split a queued run into chunks and enqueue them. Safe to redeliver: a planned run
    only has its unfinished chunks enqueued again."""
    with transaction.atomic():
        run = (
            AttributionRun.objects.select_for_update(of=("self",))
            .select_related("scorer", "project")
            .filter(pk=run_id)
            .first()
        )
        if run is None or not run.is_active:
            return
        if not run.chunks.exists():
            if run.runs_a_model:
                # The old credits of a rerun go now; chunks upsert the new ones.
                StepCredit.objects.filter(run=run).delete()
                chunks = _model_chunks(run)
                run.total = sum(c.steps for c in chunks)
            else:
                # One chunk for the whole selection: the maths is vectorised over all of it.
                chunks = [AttributionChunk(run=run, number=0)]
                run.total = _selected_steps(run).count()
            AttributionChunk.objects.bulk_create(chunks, batch_size=1000)
            run.chunks_total = len(chunks)
            if not chunks:
                run.status = AttributionRun.Status.DONE
                run.started_at = run.finished_at = timezone.now()
            run.save(update_fields=["total", "chunks_total", "status", "started_at", "finished_at"])
        pending = list(
            run.chunks.filter(status=AttributionChunk.Status.PENDING).values_list("pk", flat=True)
        )
        queue = run.scorer.queue if run.runs_a_model and run.scorer else "default"

        def enqueue() -> None:
            from scoring import tasks

            for chunk_id in pending:
                tasks.attribution_chunk.apply_async(args=[chunk_id], queue=queue)

        transaction.on_commit(enqueue)


# --- Running a chunk -----------------------------------------------------------------------


def attribution_chunk_run(*, chunk_id: int) -> None:
    """Compute one chunk on a worker and record it (see the module docstring)."""
    chunk = AttributionChunk.objects.select_related("run__scorer").filter(pk=chunk_id).first()
    if chunk is None or chunk.status == AttributionChunk.Status.DONE:
        return
    run = chunk.run
    if not run.is_active:
        return
    if not chunk_claim(chunk, run):
        return
    try:
        if run.method == AttributionRun.Method.TOKEN_SALIENCY:
            _saliency_chunk(run, chunk)
        elif run.runs_a_model:
            _model_chunk(run, chunk)
        else:
            _cpu_chunk(run, chunk)
    except TRANSIENT_ERRORS:
        raise
    except Exception as error:
        attribution_run_fail(run_id=run.pk, error=error)
        raise


def _locked(
    chunk: AttributionChunk,
) -> tuple[AttributionChunk, AttributionRun] | None:
    """The chunk and its run, locked, if the chunk still has work to record."""
    locked = AttributionChunk.objects.select_for_update().filter(pk=chunk.pk).first()
    run = AttributionRun.objects.select_for_update().filter(pk=chunk.run_id).first()
    if locked is None or run is None:
        return None  # a rerun replaced the chunk
    if locked.status == AttributionChunk.Status.DONE or not run.is_active:
        return None
    return locked, run


def _record_chunk(
    locked: AttributionChunk,
    run: AttributionRun,
    *,
    done: int,
    metrics: dict[str, Any],
    total: int | None = None,
) -> None:
    now = timezone.now()
    locked.status = AttributionChunk.Status.DONE
    locked.finished_at = now
    locked.save(update_fields=["status", "finished_at"])
    run.done += done
    run.chunks_done += 1
    run.metrics = metrics
    fields = ["done", "chunks_done", "metrics"]
    if run.chunks_done >= run.chunks_total:
        run.status = AttributionRun.Status.DONE
        run.finished_at = now
        seconds = (now - (run.started_at or run.created_at)).total_seconds()
        run.steps_per_second = run.done / seconds if seconds > 0 and run.done else None
        fields += ["status", "finished_at", "steps_per_second"]
    if total is not None or run.total < run.done:
        run.total = run.done if total is None else total
        fields.append("total")
    run.save(update_fields=fields)


# --- CPU methods: the whole selection in one chunk, through binary COPY ------------------------


def _copy_out(sql: str, params: list[Any], types: list[str]) -> list[np.ndarray]:
    buffer = bytearray()
    with connection.cursor() as wrapper, wrapper.cursor.copy(sql, params) as copy:
        for data in copy:
            buffer += data
    return copyio.decode(buffer, types)


def read_tables(
    run: AttributionRun,
) -> tuple[methods.StepTable, methods.TrajectoryTable]:
    """The run's selected labelable steps and their trajectories as arrays, each read
    with one binary ``COPY``."""
    trajectories_sql, trajectories_params = (
        _trajectory_queryset(run).values("id").query.sql_with_params()
    )
    params: list[Any] = []
    joins = []
    score = "'NaN'::float8"
    if run.scorer_id is not None:
        joins.append("LEFT JOIN scoring_stepscore sc ON sc.step_id = s.id AND sc.scorer_id = %s")
        params.append(run.scorer_id)
        score = "COALESCE(sc.value, 'NaN'::float8)"
    reward = "'NaN'::float8"
    if run.label_source:
        source = label_source_parse(run.label_source, scorer=run.scorer.name if run.scorer else "")
        labels_sql, labels_params = label_source_sql(run.project, source)
        # Several labels on a step (several schemas) count as their mean.
        joins.append(
            f"LEFT JOIN (SELECT step_id, avg(value)::float8 AS value FROM ({labels_sql}) ls"
            " GROUP BY step_id) lab ON lab.step_id = s.id"
        )
        params += labels_params
        reward = "COALESCE(lab.value, 'NaN'::float8)"
    steps_sql = (
        f"COPY (SELECT s.trajectory_id, s.id, {score}, {reward},"
        " hashtextextended(s.prefix_hash, 0)"
        f" FROM trajectories_step s {' '.join(joins)}"
        f" WHERE s.labelable AND s.trajectory_id IN ({trajectories_sql})"
        " ORDER BY s.trajectory_id, s.index) TO STDOUT (FORMAT binary)"
    )
    trajectory, step, score_values, reward_values, node = _copy_out(
        steps_sql, [*params, *trajectories_params], ["int8", "int8", "float8", "float8", "int8"]
    )
    # A trajectory without a task key is a task of its own.
    table_sql = (
        "COPY (SELECT t.id, COALESCE(t.outcome_reward, 'NaN'::float8),"
        " CASE WHEN t.success IS NULL THEN 'NaN'::float8 WHEN t.success THEN 1.0 ELSE 0.0 END,"
        " (dense_rank() OVER (ORDER BY CASE WHEN t.task_key = '' THEN 'id:' || t.id"
        " ELSE 'key:' || t.task_key END))::int8"
        f" FROM trajectories_trajectory t WHERE t.id IN ({trajectories_sql})"
        " ORDER BY t.id) TO STDOUT (FORMAT binary)"
    )
    ids, outcome_reward, success, group = _copy_out(
        table_sql, list(trajectories_params), ["int8", "float8", "float8", "int8"]
    )
    return (
        methods.StepTable(trajectory, step, score_values, reward_values, node),
        methods.TrajectoryTable(ids, outcome_reward, success, group),
    )


def _rewards_source(run: AttributionRun) -> str:
    if run.label_source:
        return "labels"
    if run.method == AttributionRun.Method.RETURNS and run.scorer_id is not None:
        return "scorer"
    return "none"


def credits_write(run: AttributionRun, credits: methods.Credits) -> int:
    """Replace the run's credits with ``credits`` by one binary ``COPY`` (inside the
    caller's transaction). Steps whose credit is not a finite number are not stored."""
    finite = np.isfinite(credits.value)
    if credits.level is not None:
        finite &= np.isfinite(credits.level)
    step = credits.step[finite]
    data = copyio.encode(
        [
            ("int8", step),
            ("int8", np.full(step.size, run.pk, dtype=np.int64)),
            ("float8", credits.value[finite]),
            ("float8", None if credits.level is None else credits.level[finite]),
            ("jsonb", None),
        ],
        int(step.size),
    )
    with connection.cursor() as wrapper:
        wrapper.execute("DELETE FROM scoring_stepcredit WHERE run_id = %s", [run.pk])
        with wrapper.cursor.copy(
            "COPY scoring_stepcredit (step_id, run_id, value, level, detail)"
            " FROM STDIN (FORMAT binary)"
        ) as copy:
            view = memoryview(data)
            for start in range(0, len(view), COPY_PIECE):
                copy.write(view[start : start + COPY_PIECE])
    return int(step.size)


def _cpu_chunk(run: AttributionRun, chunk: AttributionChunk) -> None:
    started = time.perf_counter()
    steps, trajectories = read_tables(run)
    read_s = time.perf_counter() - started
    rewards = _rewards_source(run)
    credits = methods.compute(run.method, run.parameters, steps, trajectories, rewards=rewards)
    with transaction.atomic():
        locked = _locked(chunk)
        if locked is None:
            return
        chunk, run = locked
        before_write = time.perf_counter()
        written = credits_write(run, credits)
        metrics = {
            **credits.metrics,
            "selected_steps": steps.size,
            "credited_steps": written,
            "read_s": round(read_s, 4),
            "write_s": round(time.perf_counter() - before_write, 4),
        }
        if methods.METHODS[run.method].labels:
            metrics["rewards"] = rewards
        # The total becomes the steps that got a credit (e.g. only scored steps).
        _record_chunk(chunk, run, done=written, metrics=metrics, total=written)


# --- Model methods: leave-one-out and Shapley over steps or agents, token saliency ---------


def _trajectory_inputs(
    trajectory_ids: list[int],
) -> tuple[list[prm.TrajectoryInput], dict[int, list[str]]]:
    """Whole trajectories as a scorer reads them (every labelable step marked and
    scored), and each step's agent."""
    tasks_by_id = dict(Trajectory.objects.filter(pk__in=trajectory_ids).values_list("pk", "task"))
    steps: dict[int, list[prm.StepInput]] = {pk: [] for pk in sorted(tasks_by_id)}
    agents: dict[int, list[str]] = {pk: [] for pk in tasks_by_id}
    rows = (
        Step.objects.filter(trajectory_id__in=trajectory_ids)
        .order_by("trajectory_id", "index")
        .values_list("trajectory_id", "pk", "role", "content", "labelable", "agent")
    )
    for trajectory_id, pk, role, content, labelable, agent in rows.iterator(chunk_size=2000):
        steps[trajectory_id].append(
            prm.StepInput(pk, content, role, labelable=labelable, score=labelable)
        )
        agents[trajectory_id].append(agent)
    inputs = [prm.TrajectoryInput(pk, tasks_by_id[pk], tuple(items)) for pk, items in steps.items()]
    return inputs, agents


def _players_are_agents(setting: str, agents: list[str], trajectory: prm.TrajectoryInput) -> bool:
    if setting == "steps":
        return False
    named = {a for a, s in zip(agents, trajectory.steps, strict=True) if a and s.labelable}
    if setting == "agents":
        return bool(named)
    return len(named) >= 2


def _model_chunk(run: AttributionRun, chunk: AttributionChunk) -> None:
    from scoring.prm import adapters, coalitions

    assert run.scorer is not None
    scorer = adapters.scorer_load(scorer_spec(run.scorer))
    inputs, agents = _trajectory_inputs(chunk.trajectory_ids)
    params = run.parameters
    jobs = []
    for trajectory in inputs:
        if not any(step.labelable for step in trajectory.steps):
            continue
        if run.method == AttributionRun.Method.LEAVE_ONE_OUT:
            jobs.append(coalitions.leave_one_out_job(trajectory))
        else:
            over_agents = _players_are_agents(params["players"], agents[trajectory.key], trajectory)
            jobs.append(
                coalitions.shapley_job(
                    trajectory,
                    permutations=params["permutations"],
                    seed=params["seed"],
                    agents=agents[trajectory.key] if over_agents else None,
                )
            )
    results = coalitions.run_jobs(scorer, jobs, how=params["how"], empty=params["empty"])
    rows = [
        StepCredit(step_id=c.key, run_id=run.pk, value=c.value, detail=c.detail)
        for result in results
        for c in result.credits
    ]
    with transaction.atomic():
        locked = _locked(chunk)
        if locked is None:
            return
        chunk, run = locked
        existing = set(
            Step.objects.filter(pk__in=[r.step_id for r in rows]).values_list("pk", flat=True)
        )
        StepCredit.objects.bulk_create(
            [r for r in rows if r.step_id in existing],
            batch_size=2000,
            update_conflicts=True,
            unique_fields=["step", "run"],
            update_fields=["value", "level", "detail"],
        )
        _record_chunk(chunk, run, done=chunk.steps, metrics=_merged(run.metrics, results))


def _merged(metrics: dict[str, Any], results: list[Any]) -> dict[str, Any]:
    """Run metrics with a chunk's trajectory reports added: counts, and for Shapley the
    largest efficiency gap |sum of values - (v(all) - v(none))| and the mean standard
    error of the sampled values."""
    out = dict(metrics)
    out["trajectories"] = out.get("trajectories", 0) + len(results)
    for result in results:
        report = result.report
        out["players"] = out.get("players", 0) + report.get("players", 0)
        if "efficiency_gap" in report:
            out["efficiency_gap_max"] = max(
                out.get("efficiency_gap_max", 0.0), report["efficiency_gap"]
            )
            out["evaluations"] = out.get("evaluations", 0) + report["evaluations"]
            out["exact_trajectories"] = out.get("exact_trajectories", 0) + int(report["exact"])
            out[f"over_{report['over']}"] = out.get(f"over_{report['over']}", 0) + 1
            if report.get("mean_std_error") is not None:
                count = out.get("std_error_count", 0) + 1
                total = out.get("std_error_sum", 0.0) + report["mean_std_error"]
                out["std_error_count"], out["std_error_sum"] = count, total
                out["mean_std_error"] = total / count
    return out


def _saliency_chunk(run: AttributionRun, chunk: AttributionChunk) -> None:
    from scoring.prm import adapters
    from scoring.prm.saliency import token_saliency

    assert run.scorer is not None
    step_id = run.selection["step"]
    scorer = adapters.scorer_load(scorer_spec(run.scorer))
    inputs, _ = _trajectory_inputs(chunk.trajectory_ids)
    if not inputs:
        raise AttributionError("the step is gone")
    trajectory = inputs[0]
    position = next(i for i, s in enumerate(trajectory.steps) if s.key == step_id)
    cut = prm.TrajectoryInput(trajectory.key, trajectory.task, trajectory.steps[: position + 1])
    started = time.perf_counter()
    saliency = token_saliency(scorer, cut, n_steps=run.parameters["n_steps"])
    metrics = {
        "step": step_id,
        **saliency.to_dict(),
        "seconds": round(time.perf_counter() - started, 3),
    }
    with transaction.atomic():
        locked = _locked(chunk)
        if locked is None:
            return
        chunk, run = locked
        _record_chunk(chunk, run, done=1, metrics=metrics)


# --- Ending a run --------------------------------------------------------------------------


def attribution_run_fail(*, run_id: int, error: str | BaseException) -> None:
    job_fail(AttributionRun, pk=run_id, error=error)


def attribution_run_cancel(*, run: AttributionRun) -> AttributionRun:
    """Stop a queued or running run: chunks not yet finished are skipped. Credits already
    written stay."""
    return job_cancel(run)
