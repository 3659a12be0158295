"""Exports: a selection of trajectories, labelled by a chosen label source, written as
training records by the Django-free writers in :mod:`exports.writers`, and export
jobs (the page and the API) that do it on a worker.

The trajectories are read in one consistent snapshot (:mod:`exports.services.reading`),
so the same data always gives the same bytes. Files are written under temporary names and renamed
only when complete (the writers' guarantee), so a failed or cancelled export never
leaves a file that looks finished.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from exports.models import ExportJob
from exports.services import bulk
from exports.services.batches import (
    BatchRows,
    batch_name_check,
    batch_rows_read,
    batch_version_add,
    export_batch_get_or_create,
)
from exports.services.plan import ExportPlan, export_plan_of
from exports.services.reading import ExportCancelled, export_trajectories, progress_tick
from exports.services.requests import request_json
from exports.writers import ExportResult, build_manifest, write_export, write_manifest
from stepscope.events import event_emit
from stepscope.jobs.lifecycle import job_cancel, job_end, job_fail
from stepscope.locks import LockClass, session_lock_try
from stepscope.queueing import broker_require
from trajectories.services.progress import ProgressWriter


def export_write(
    plan: ExportPlan, *, out_dir: Path, progress: ProgressWriter | None = None
) -> dict[str, Any]:
    """Write the export's files and manifest into ``out_dir``; return the manifest."""
    return _export_write(plan, out_dir=out_dir, progress=progress, batch=False)[0]


def _export_write(
    plan: ExportPlan, *, out_dir: Path, progress: ProgressWriter | None, batch: bool
) -> tuple[dict[str, Any], BatchRows | None]:
    """The manifest, and with ``batch`` the rows a batch version keeps, read in the
    snapshot the files were written from."""
    out_dir.mkdir(parents=True, exist_ok=True)
    nested = connection.in_atomic_block
    with transaction.atomic():
        if not nested:
            # One snapshot for the whole read: the export sees one state of the data.
            # (Inside a caller's transaction, the caller's isolation applies.)
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        result = bulk.bulk_export_write(
            plan, out_dir=out_dir, progress=lambda done: progress_tick(progress, done)
        )
        if result is None:
            result = write_export(
                export_trajectories(plan, progress=progress, read_ahead=not nested),
                format_name=plan.export.name,
                options=plan.request.options,
                out_dir=out_dir,
                container=plan.container,
                compress=plan.request.compress,
                splits=plan.splits,
                seed=plan.request.seed,
            )
        # In the snapshot the files were read from: the manifest's annotators are those
        # of the labels written.
        manifest = export_manifest(plan, result)
        rows = batch_rows_read(plan) if batch else None
    write_manifest(out_dir, manifest)
    return manifest, rows


def export_manifest(plan: ExportPlan, result: ExportResult) -> dict[str, Any]:
    """The manifest of an export that wrote ``result``: the selection, the label source
    and the revisions, as the plan resolved them."""
    request = plan.request
    revisions = plan.revisions
    return build_manifest(
        result,
        selection={"name": request.selection_name, "definition": request.selection},
        label_source=str(request.labels),
        schema_revision=revisions["label_schema"],
        scorer_revisions=revisions["scorers"],
        attribution_revisions=revisions["attribution"],
        # The lossless format lists the annotators of the labels it wrote out, under
        # the names it wrote them; the other formats, whose labels a source resolved.
        annotators=None if result.annotators else _source_annotators(plan),
    )


def _source_annotators(plan: ExportPlan) -> list[str]:
    """The people (or imports) whose labels the export's label source resolved on the
    labelable steps of the selected trajectories."""
    if plan.annotators_sql is None:
        return []
    sql, params = plan.annotators_sql
    chosen_sql, chosen_params = plan.chosen.values("id").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT a.username FROM ({sql}) a"
            " JOIN trajectories_step s ON s.id = a.step_id"
            f" WHERE s.labelable AND s.trajectory_id IN ({chosen_sql})",
            [*params, *chosen_params],
        )
        return sorted(username for (username,) in cursor.fetchall())


def export_start(*, plan: ExportPlan, user: User, batch: str = "") -> ExportJob:
    """Queue ``plan``'s export; the job keeps the plan for the worker. With ``batch`` (a
    name; the project's batch of that name is made if it has none) the export, once
    finished, is that batch's next version."""
    from exports.tasks import export_run

    request = plan.request
    if batch:
        batch_name_check(batch)
    broker_require()  # a dead broker is said now; no job is left queued
    with transaction.atomic():
        into = (
            export_batch_get_or_create(project=plan.project, name=batch, user=user)
            if batch
            else None
        )
        job = ExportJob.objects.create(
            batch=into,
            project=plan.project,
            format=request.format,
            container=request.container,
            compress=request.compress,
            label_source=str(request.labels),
            neutral=request.options.neutral.value,
            options={**request_json(request), "plan": plan.to_json()},
            selection_name=request.selection_name,
            selection=request.selection,
            split=request.split,
            seed=request.seed,
            total=plan.chosen.count(),
            created_by=user,
        )
        transaction.on_commit(lambda: export_run.delay(job.pk))
    return job


def export_job_run(*, job_id: int) -> ExportJob:
    """The Celery task's body. A redelivered job starts again from an empty folder; a
    finished or cancelled one is left as it is.

    A task can be handed out a second time while a live worker still runs it (it ran
    past the broker's visibility timeout): the session lock taken here lets only one
    worker write the job's folder. A worker that died lost its connection, and with it
    the lock, so its redelivered task runs again."""
    with session_lock_try(LockClass.EXPORT, job_id) as held:
        if not held:
            return ExportJob.objects.get(pk=job_id)  # the worker holding the lock finishes it
        return _export_job_run_locked(job_id)


def _export_job_run_locked(job_id: int) -> ExportJob:
    job = ExportJob.objects.select_related("project").get(pk=job_id)
    if not job.is_active:
        return job
    out_dir = Path(settings.MEDIA_ROOT) / "exports" / str(job.pk)
    shutil.rmtree(out_dir, ignore_errors=True)
    # Started when a worker first took it (a redelivered job keeps that time).
    started = ExportJob.objects.filter(pk=job.pk, status__in=ExportJob.ACTIVE).update(
        status=ExportJob.Status.RUNNING,
        done=0,
        started_at=Coalesce(F("started_at"), Value(timezone.now())),
    )
    if not started:  # cancelled meanwhile
        job.refresh_from_db()
        return job
    progress = ProgressWriter("trajectories_exportjob", job.pk, "done")
    try:
        manifest, rows = _export_write(
            export_plan_of(job), out_dir=out_dir, progress=progress, batch=job.batch_id is not None
        )
    except ExportCancelled:
        shutil.rmtree(out_dir, ignore_errors=True)
        job.refresh_from_db()
        return job
    except Exception as error:  # recorded on the job for the page; the worker goes on
        shutil.rmtree(out_dir, ignore_errors=True)
        job_fail(ExportJob, pk=job.pk, error=error)
        job.refresh_from_db()
        return job
    finally:
        progress.close()
    files = [{"name": name, **info} for name, info in sorted(manifest["files"].items())]
    with transaction.atomic():
        published = job_end(
            job,
            ExportJob.Status.DONE,
            done=manifest["counts"]["trajectories"],
            out_dir=str(out_dir),
            files=files,
            manifest=manifest,
            row_count=sum(f["rows"] for f in files),
        )
        # Done and a batch's new version together: a job that did not finish has none.
        if published and rows is not None:
            batch_version_add(job=job, rows=rows)
        if published:
            event_emit(
                project_id=job.project_id,
                kind="export.ready",
                data={
                    "export": job.pk,
                    "format": job.format,
                    "files": [{"name": f["name"], "sha256": f.get("sha256")} for f in files],
                    "trajectories": manifest["counts"]["trajectories"],
                },
            )
    if not published:  # cancelled after the last file was written: nothing is published
        shutil.rmtree(out_dir, ignore_errors=True)
    job.refresh_from_db()
    return job


def export_cancel(*, job: ExportJob) -> ExportJob:
    """Stop a queued or running export: its folder is removed, nothing is published."""
    return job_cancel(job)


def manifest_json(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, indent=2, sort_keys=True)
