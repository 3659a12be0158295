"""Exports: a selection of trajectories, labelled by a chosen label source, written as
training records by the Django-free writers in :mod:`trajectories.batches`.

Reading happens in one consistent snapshot (REPEATABLE READ), a chunk of trajectories at
a time in task order, so memory does not grow with the export and the same data always
gives the same bytes. Files are written under temporary names and renamed
only when complete (the writers' guarantee), so a failed or cancelled export never
leaves a file that looks finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import queue
import re
import shutil
import threading
import uuid
from collections.abc import Generator, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.db.models.functions import MD5
from django.utils import timezone

from exports.models import ExportJob, Selection
from labeling.sources import LabelSource, label_source_parse, label_source_sql, scorer_id_for
from scoring.models import AttributionRun
from stepscope.queueing import broker_require
from trajectories import selectors
from trajectories.batches import (
    ExportOptions,
    ExportResult,
    ExportStep,
    ExportTrajectory,
    build_manifest,
    parse_split_spec,
    write_export,
    write_manifest,
)
from trajectories.batches.export import export_format
from trajectories.models import Project
from trajectories.services.progress import ProgressWriter

# Trajectories read per round trip.
EXPORT_CHUNK = 200
# The trajectory columns trajectories_from_rows reads (``heads``), for an id array.
HEADS_SQL = (
    "SELECT id, external_id, task, task_key, ground_truth, model_name, outcome_reward,"
    " success, metadata, source_format FROM trajectories_trajectory WHERE id = ANY(%s)"
)


@dataclass(frozen=True)
class ExportRequest:
    """Validated export parameters (what the command, the page and the API share)."""

    format: str
    labels: LabelSource
    options: ExportOptions
    container: str = ""
    compress: bool = False
    selection_name: str = ""
    selection: dict[str, Any] = dataclasses.field(default_factory=dict)
    split: str = ""
    seed: int = 0
    scorer: str = ""  # a scorer whose step scores go along (dpo by score, rl rewards)
    credit_run: int | None = None  # an attribution run whose credits go along (rl, dpo)


class ExportCancelled(Exception):
    pass


def export_request_build(
    *,
    project: Project,
    format: str,
    labels: str,
    neutral: str,
    selection: str = "",
    split: str = "",
    seed: int = 0,
    container: str = "",
    compress: bool = False,
    threshold: float = 0.5,
    scorer: str = "",
    credit_run: int | None = None,
    options: dict[str, Any] | None = None,
) -> ExportRequest:
    """Check every parameter before anything is queued; ValueError says what is wrong."""
    export = export_format(format)
    source = label_source_parse(labels, threshold=threshold, scorer=scorer)
    export_options = ExportOptions(neutral=neutral, **(options or {}))  # type: ignore[arg-type]
    if split:
        parse_split_spec(split)
    definition: dict[str, Any] = {}
    if selection:
        saved = Selection.objects.filter(project=project, name=selection).first()
        if saved is None:
            raise ValueError(f"no selection named {selection!r} in project {project.slug!r}")
        definition = dict(saved.definition)
        _filters(definition)  # a stored definition that no longer parses is an error now
    if container and container not in export.containers:
        allowed = ", ".join(export.containers)
        raise ValueError(f"{format} can be written as {allowed}, not {container}")
    if scorer:
        scorer_id_for(project, scorer)
    if credit_run is not None:
        _credit_run_for(project, credit_run)
    elif export_options.pair_value == "credit" and format == "dpo":
        raise ValueError("dpo pairs by credit need an attribution run (--credit-run)")
    label_source_sql(project, source)  # names a missing annotator's scorer now, not later
    return ExportRequest(
        format=format,
        labels=source,
        options=export_options,
        container=container,
        compress=compress,
        selection_name=selection,
        selection=definition,
        split=split,
        seed=seed,
        scorer=scorer,
        credit_run=credit_run,
    )


def _credit_run_for(project: Project, run_id: int) -> AttributionRun:
    """A finished attribution run of ``project`` that credits steps; ValueError otherwise."""
    run = AttributionRun.objects.filter(project=project, pk=run_id).first()
    if run is None:
        raise ValueError(f"no attribution run {run_id} in project {project.slug!r}")
    if run.method == AttributionRun.Method.TOKEN_SALIENCY:
        raise ValueError(f"attribution run {run_id} is token saliency; it credits no steps")
    if run.status != AttributionRun.Status.DONE:
        raise ValueError(
            f"attribution run {run_id} is {run.status}; only a finished run's credits export"
        )
    return run


def export_write(
    *,
    project: Project,
    request: ExportRequest,
    out_dir: Path,
    progress: ProgressWriter | None = None,
) -> dict[str, Any]:
    """Write the export's files and manifest into ``out_dir``; return the manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    nested = connection.in_atomic_block
    with transaction.atomic():
        if not nested:
            # One snapshot for the whole read: the export sees one state of the data.
            # (Inside a caller's transaction, the caller's isolation applies.)
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        # Imported here: the bulk module builds on this one.
        from exports.services import bulk

        result = bulk.bulk_export_write(
            project, request, out_dir=out_dir, progress=lambda done: _tick(progress, done)
        )
        if result is None:
            result = write_export(
                export_trajectories(project, request, progress=progress, read_ahead=not nested),
                format_name=request.format,
                options=request.options,
                out_dir=out_dir,
                container=request.container or None,  # type: ignore[arg-type]
                compress=request.compress,
                splits=parse_split_spec(request.split) if request.split else None,
                seed=request.seed,
            )
    manifest = export_manifest(project, request, result)
    write_manifest(out_dir, manifest)
    return manifest


def export_manifest(
    project: Project, request: ExportRequest, result: ExportResult
) -> dict[str, Any]:
    """The manifest of an export that wrote ``result`` (selection, label source and
    every revision the request names)."""
    return build_manifest(
        result,
        selection={"name": request.selection_name, "definition": request.selection},
        label_source=str(request.labels),
        schema_revision=_schema_revision(project),
        scorer_revisions=_scorer_revisions(project, request),
        attribution_revisions=_attribution_revisions(project, request),
    )


def export_trajectories(
    project: Project,
    request: ExportRequest,
    *,
    progress: ProgressWriter | None = None,
    read_ahead: bool = False,
) -> Iterator[ExportTrajectory]:
    """The selected trajectories in task order (task key, then task text, then id), each
    with its steps, resolved labels and, when asked for, scores and corrections.

    Must run inside a transaction. With ``read_ahead`` (for a transaction of its own, at
    REPEATABLE READ) a second connection reads the next chunks while this thread builds
    records from the last: it imports this transaction's snapshot, so both see exactly
    the same data, and PostgreSQL's work overlaps with Python's.
    """
    order = ordered_ids(project, request)
    lossless = request.format == "stepscope"
    if read_ahead:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_export_snapshot()")
            snapshot = cursor.fetchone()[0]
        chunks = _read_ahead(project, request, order, snapshot)
    else:
        chunks = _read_chunks(project, request, order)
    try:
        for ids, heads, rows in chunks:
            yield from trajectories_from_rows(ids, heads, rows, lossless)
            _tick(progress, len(ids))
    finally:
        chunks.close()


# What one chunk reads: the trajectory ids in order, their rows, and their steps' rows.
Chunk = tuple[list[int], dict[int, tuple[Any, ...]], list[tuple[Any, ...]]]
# Chunks the reading thread may hold before this thread takes them (bounded memory).
READ_AHEAD_CHUNKS = 2
_SNAPSHOT_ID = re.compile(r"[0-9A-Fa-f-]+")


def _read_chunks(
    project: Project, request: ExportRequest, order: list[int]
) -> Generator[Chunk, None, None]:
    """The rows of ``order``'s trajectories, a chunk at a time, on this thread's
    connection, with each step's values from :func:`step_values_table`."""
    with step_values_table(project, request) as table:
        steps_sql, extra_params = _steps_sql(project, request, table)
        for first in range(0, len(order), EXPORT_CHUNK):
            ids = order[first : first + EXPORT_CHUNK]
            with connection.cursor() as cursor:
                cursor.execute(HEADS_SQL, [ids])
                heads = {row[0]: row for row in cursor.fetchall()}
                cursor.execute(steps_sql, [*extra_params, ids])
                yield ids, heads, cursor.fetchall()


@contextlib.contextmanager
def step_values_table(project: Project, request: ExportRequest) -> Iterator[str]:
    """A temporary table of ``(step_id, label, credit)``: the resolved labels and the
    chosen run's credits, a row per step, indexed, so that each step's values are one
    index lookup. Yields its name; dropped at the end (or with the transaction)."""
    table = f"export_values_{uuid.uuid4().hex[:12]}"
    values_sql, values_params = step_values_sql(project, request)
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TEMP TABLE {table} ON COMMIT DROP AS {values_sql}", values_params)
        try:
            with transaction.atomic():
                cursor.execute(f"CREATE UNIQUE INDEX ON {table} (step_id)")
        except IntegrityError as error:
            detail = getattr(error.__cause__, "diag", None)
            raise ValueError(
                f"label source {request.labels} gives some step more than one label"
                f" ({detail.message_detail if detail else error}); name one schema's labels"
            ) from None
    # No ANALYZE: every read of the table is an index lookup by step (see _steps_sql).
    try:
        yield table
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {table}")


def _read_ahead(
    project: Project, request: ExportRequest, order: list[int], snapshot: str
) -> Generator[Chunk, None, None]:
    """``_read_chunks`` on a thread of its own, in a transaction that imports
    ``snapshot``, handing chunks over through a bounded queue. Closing this generator
    (the export finished, failed or was cancelled) stops the thread and waits for it."""
    if not _SNAPSHOT_ID.fullmatch(snapshot):
        raise ValueError(f"unexpected snapshot id {snapshot!r}")
    handed: queue.Queue[Chunk | BaseException | None] = queue.Queue(maxsize=READ_AHEAD_CHUNKS)
    stop = threading.Event()

    def hand(item: Chunk | BaseException | None) -> bool:
        while not stop.is_set():
            try:
                handed.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        # Django gives this thread a connection of its own; it is closed at the end.
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                cursor.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
                with closing(_read_chunks(project, request, order)) as chunks:
                    for chunk in chunks:
                        if not hand(chunk):
                            return
            hand(None)
        except BaseException as error:  # handed to the consuming thread, which raises it
            hand(error)
        finally:
            connection.close()

    reader = threading.Thread(target=read, name="export-reader", daemon=True)
    reader.start()
    try:
        while (item := handed.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        reader.join()


def ordered_ids(project: Project, request: ExportRequest) -> list[int]:
    chosen = selectors.trajectories_filtered(project, _filters(request.selection))
    return list(
        chosen.annotate(task_digest=MD5("task"))
        .order_by("task_key", "task_digest", "id")
        .values_list("id", flat=True)
    )


def trajectories_from_rows(
    ids: list[int],
    heads: dict[int, tuple[Any, ...]],
    rows: list[tuple[Any, ...]],
    lossless: bool,
) -> Iterator[ExportTrajectory]:
    """Snapshots of the trajectories ``ids``, in that order, from their rows (``heads``,
    by id) and their steps' rows (in the column order of :func:`_steps_sql`)."""
    steps: dict[int, list[ExportStep]] = {i: [] for i in ids}
    annotators: dict[int, list[list[tuple[str, int]]]] = {i: [] for i in ids}
    for row in rows:
        (
            trajectory_id, index, kind, role, agent, content, tool_name, tool_args,
            step_metadata, labelable, prefix_hash, label, score, credit, correction,
            by_annotator,
        ) = row  # fmt: skip
        steps[trajectory_id].append(
            ExportStep(
                index=index, kind=kind, role=role, content=content, labelable=labelable,
                prefix_hash=prefix_hash, agent=agent, tool_name=tool_name,
                tool_args=None if tool_args is None else _json(tool_args),
                metadata=_json(step_metadata) or {}, label=label, score=score, credit=credit,
                correction=correction or None,
            )
        )  # fmt: skip
        if lossless:
            annotators[trajectory_id].append([(n, v) for n, v in (_json(by_annotator) or [])])
    for trajectory_id in ids:
        (_, external_id, task, task_key, ground_truth, model_name, outcome_reward, success,
         metadata, source_format) = heads[trajectory_id]  # fmt: skip
        per_annotator = annotators[trajectory_id]
        yield ExportTrajectory(
            id=trajectory_id,
            external_id=external_id,
            task=task,
            task_key=task_key,
            ground_truth=ground_truth,
            model_name=model_name,
            outcome_reward=outcome_reward,
            success=success,
            metadata=_json(metadata) or {},
            source_format=source_format,
            steps=steps[trajectory_id],
            labels_by_annotator=per_annotator if lossless and any(per_annotator) else (),
        )


def _json(value: Any) -> Any:
    """Django sets psycopg to hand JSON columns over as text; decode them here. (Most
    step metadata is empty: that case skips the decoder.)"""
    if value == "{}":
        return {}
    return json.loads(value) if isinstance(value, str) else value


def _tick(progress: ProgressWriter | None, amount: int) -> None:
    if progress is not None and progress.report(amount) and progress.status() == "cancelled":
        raise ExportCancelled


def _filters(definition: dict[str, Any]) -> selectors.TrajectoryFilters:
    return selectors.trajectory_filters_from(definition)


def step_values_sql(project: Project, request: ExportRequest) -> tuple[str, list[Any]]:
    """``(step_id, label, credit)`` for every step the label source labels or the credit
    run credits: one pass over each (hash joins), so that reading a step's values later
    is one lookup instead of one per table."""
    labels_sql, params = label_source_sql(project, request.labels)
    if request.credit_run is None:
        return (
            f"SELECT l.step_id, l.value AS label, NULL::float AS credit FROM ({labels_sql}) l",
            params,
        )
    return (
        "SELECT COALESCE(l.step_id, c.step_id) AS step_id, l.value AS label, c.value AS credit"
        f" FROM ({labels_sql}) l FULL JOIN"
        " (SELECT step_id, value FROM scoring_stepcredit WHERE run_id = %s) c"
        " ON c.step_id = l.step_id",
        [*params, request.credit_run],
    )


def _steps_sql(
    project: Project, request: ExportRequest, values_table: str
) -> tuple[str, list[Any]]:
    """Steps of a chunk of trajectories (the last parameter, an id array) in order, with
    the resolved label, the chosen scorer's score, the chosen attribution run's credit, a
    correction and per-annotator labels when the format uses them."""
    # Each per-step value is a lookup on a unique key whatever the tables' statistics say:
    # a correlated subquery, or a lateral one kept from being flattened into a join by
    # OFFSET 0. (As plain joins, the planner chose to scan the whole label and credit
    # tables for every chunk: quadratic in the export's size.)
    params: list[Any] = []
    score = "NULL::float"
    if request.scorer:
        score = (
            "(SELECT sc.value FROM scoring_stepscore sc"
            " WHERE sc.step_id = s.id AND sc.scorer_id = %s)"
        )
        params.append(scorer_id_for(project, request.scorer))
    wants_corrections = request.format == "dpo" and request.options.corrections
    correction = (
        "(SELECT c.correction FROM ("
        "   SELECT f.correction, 0 AS rank FROM labeling_finallabel f"
        "   WHERE f.step_id = s.id AND f.correction <> ''"
        "   UNION ALL"
        "   SELECT l.correction, 1 FROM labeling_steplabel l"
        "   WHERE l.step_id = s.id AND l.correction <> '' AND l.status = 'submitted'"
        " ) c ORDER BY c.rank LIMIT 1)"
        if wants_corrections
        else "NULL"
    )
    annotators = (
        "(SELECT json_agg(json_build_array(u.username, l.value) ORDER BY u.username)"
        " FROM labeling_steplabel l JOIN auth_user u ON u.id = l.annotator_id"
        " WHERE l.step_id = s.id AND l.status = 'submitted')"
        if request.format == "stepscope"
        else "NULL"
    )
    # Step metadata (tool call ids, token logprobs) and prefix hashes are read only by the
    # formats that use them: chat messages and the lossless format, and sibling pairs.
    metadata = "s.metadata" if request.format in ("stepscope", "sft", "rl") else "NULL"
    prefix_hash = "s.prefix_hash" if request.format == "dpo" else "''"
    sql = (
        "SELECT s.trajectory_id, s.index, s.kind, s.role, s.agent, s.content, s.tool_name,"
        f" s.tool_args, {metadata}, s.labelable, {prefix_hash}, v.label,"
        f" {score}, v.credit, {correction}, {annotators}"
        " FROM trajectories_step s"
        " LEFT JOIN LATERAL (SELECT r.label, r.credit FROM"
        f" {values_table} r WHERE r.step_id = s.id OFFSET 0) v ON true"
        " WHERE s.trajectory_id = ANY(%s)"
        " ORDER BY s.trajectory_id, s.index"
    )
    return sql, params


def _schema_revision(project: Project) -> dict[str, Any] | None:
    schema = project.label_schemas.filter(is_active=True).order_by("-version").first()
    if schema is None:
        return None
    return {"name": schema.name, "version": schema.version, "kind": schema.kind}


def _scorer_revisions(project: Project, request: ExportRequest) -> dict[str, Any]:
    from scoring.models import Scorer

    names = {n for n in (request.scorer, request.labels.scorer) if n}
    if request.labels.kind == "model":
        names.add(request.labels.name)
    revisions: dict[str, Any] = {}
    for name in sorted(names):
        scorer = Scorer.objects.get(pk=scorer_id_for(project, name))
        revisions[name] = {"kind": scorer.kind, "revision": scorer.revision}
    return revisions


def _attribution_revisions(project: Project, request: ExportRequest) -> dict[str, Any]:
    if request.credit_run is None:
        return {}
    run = _credit_run_for(project, request.credit_run)
    return {
        str(run.pk): {
            "method": run.method,
            "parameters": run.parameters,
            "scorer": run.scorer.name if run.scorer else None,
            "scorer_revision": run.scorer_revision,
            "label_source": run.label_source,
            "key": run.key,
        }
    }


# --- Export jobs (the page and the API) ------------------------------------------------


def export_start(*, project: Project, user: User, request: ExportRequest) -> ExportJob:
    from exports.tasks import export_run

    broker_require()  # a dead broker is said now; no job is left queued
    with transaction.atomic():
        job = ExportJob.objects.create(
            project=project,
            format=request.format,
            container=request.container,
            compress=request.compress,
            label_source=str(request.labels),
            neutral=request.options.neutral.value,
            options=_request_json(request),
            selection_name=request.selection_name,
            selection=request.selection,
            split=request.split,
            seed=request.seed,
            total=selectors.trajectories_filtered(project, _filters(request.selection)).count(),
            created_by=user,
        )
        transaction.on_commit(lambda: export_run.delay(job.pk))
    return job


# pg_advisory_lock's first key for export jobs (the second is the job id).
EXPORT_LOCK_CLASS = 7302


def export_job_run(*, job_id: int) -> ExportJob:
    """The Celery task's body. A redelivered job starts again from an empty folder; a
    finished or cancelled one is left as it is.

    A task can be handed out a second time while a live worker still runs it (it ran
    past the broker's visibility timeout): the session lock taken here lets only one
    worker write the job's folder. A worker that died lost its connection, and with it
    the lock, so its redelivered task runs again."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [EXPORT_LOCK_CLASS, job_id])
        (held,) = cursor.fetchone()
    if not held:
        return ExportJob.objects.get(pk=job_id)  # the worker holding the lock finishes it
    try:
        return _export_job_run_locked(job_id)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [EXPORT_LOCK_CLASS, job_id])


def _export_job_run_locked(job_id: int) -> ExportJob:
    job = ExportJob.objects.select_related("project").get(pk=job_id)
    if job.status not in (ExportJob.Status.QUEUED, ExportJob.Status.RUNNING):
        return job
    out_dir = Path(settings.MEDIA_ROOT) / "exports" / str(job.pk)
    shutil.rmtree(out_dir, ignore_errors=True)
    ExportJob.objects.filter(pk=job.pk).update(status=ExportJob.Status.RUNNING, done=0)
    progress = ProgressWriter("trajectories_exportjob", job.pk, "done")
    try:
        request = _request_from_job(job)
        manifest = export_write(
            project=job.project, request=request, out_dir=out_dir, progress=progress
        )
    except ExportCancelled:
        shutil.rmtree(out_dir, ignore_errors=True)
        job.refresh_from_db()
        return job
    except Exception as error:  # recorded on the job for the page; the worker goes on
        shutil.rmtree(out_dir, ignore_errors=True)
        ExportJob.objects.filter(pk=job.pk).update(
            status=ExportJob.Status.FAILED, error=str(error)[:2000], finished_at=timezone.now()
        )
        job.refresh_from_db()
        return job
    finally:
        progress.close()
    files = [{"name": name, **info} for name, info in sorted(manifest["files"].items())]
    ExportJob.objects.filter(pk=job.pk).exclude(status=ExportJob.Status.CANCELLED).update(
        status=ExportJob.Status.DONE,
        done=manifest["counts"]["trajectories"],
        out_dir=str(out_dir),
        files=files,
        manifest=manifest,
        row_count=sum(f["rows"] for f in files),
        finished_at=timezone.now(),
    )
    job.refresh_from_db()
    return job


def export_cancel(*, job: ExportJob) -> ExportJob:
    ExportJob.objects.filter(
        pk=job.pk, status__in=[ExportJob.Status.QUEUED, ExportJob.Status.RUNNING]
    ).update(status=ExportJob.Status.CANCELLED, finished_at=timezone.now())
    job.refresh_from_db()
    return job


def _request_json(request: ExportRequest) -> dict[str, Any]:
    options = dataclasses.asdict(request.options)
    options.pop("neutral")
    return {
        "options": options,
        "labels": {
            "text": _label_text(request.labels),
            "threshold": request.labels.threshold,
            "scorer": request.labels.scorer,
        },
        "scorer": request.scorer,
        "credit_run": request.credit_run,
    }


def _label_text(source: LabelSource) -> str:
    return "consensus" if source.kind == "consensus" else f"{source.kind}:{source.name}"


def _request_from_job(job: ExportJob) -> ExportRequest:
    stored = job.options
    labels = stored["labels"]
    return ExportRequest(
        format=job.format,
        labels=label_source_parse(
            labels["text"], threshold=labels["threshold"], scorer=labels["scorer"]
        ),
        options=ExportOptions(neutral=job.neutral, **stored["options"]),  # type: ignore[arg-type]
        container=job.container,
        compress=job.compress,
        selection_name=job.selection_name,
        selection=job.selection,
        split=job.split,
        seed=job.seed,
        scorer=stored.get("scorer", ""),
        credit_run=stored.get("credit_run"),
    )


def manifest_json(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, indent=2, sort_keys=True)
