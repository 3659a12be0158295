"""Imports: a file (or an API push) parsed by a Django-free parser and written in bulk
with ``COPY`` in one all-or-nothing transaction."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.utils import timezone

from stepscope import locks
from stepscope.events import event_emit
from stepscope.jobs.lifecycle import job_cancel, job_end, job_fail
from stepscope.queueing import broker_require, send_if_up
from stepscope.statistics import analyze_when_grown
from trajectories import prepare
from trajectories.arrivals import trajectories_arrived
from trajectories.formats import parser_for, stepscope
from trajectories.formats.base import FileError, Parser, RecordError
from trajectories.formats.stepscope_typed import TypedRecords
from trajectories.models import ImportBatch, Project
from trajectories.services.import_writer import ChunkWriter, Counts, link_parents
from trajectories.services.progress import ProgressWriter
from trajectories.services.search import search_index_enqueue

# Errors kept on a batch; the count of all of them is kept too.
MAX_ERRORS_KEPT = 1000
# A push is prepared in this process, in chunks of this many steps: PostgreSQL stores
# one while the next is prepared (a 500-record push took 78-81 ms a request with chunks
# that doubled from 1,000 steps up to prepare.CHUNK_STEPS, 61-66 ms with flat ones of
# 1,000 or 500, once a chunk's repeats were no longer asked about chunk by chunk).
PUSH_CHUNK_STEPS = 1000


class ImportRejected(Exception):
    """All-or-nothing import found bad records; nothing was written."""

    def __init__(self, batch: ImportBatch) -> None:
        super().__init__(f"{batch.rejected_count} record(s) rejected in {batch.file_name}")
        self.batch = batch


def parser_get(source_format: str, mapping: dict[str, Any] | None = None) -> Parser:
    """The parser for ``--format``; the ``mapped`` format needs its mapping. Raises
    ValueError naming the problem (unknown format, bad mapping)."""
    return parser_for(source_format, mapping)


def trajectory_import(
    *,
    project: Project,
    source_format: str,
    path: Path,
    user: User | None = None,
    skip_invalid: bool = False,
    mapping: dict[str, Any] | None = None,
    internal: bool = False,
) -> ImportBatch:
    """Import one file into ``project``, in this process. ``internal`` marks a batch an
    app's own job writes (a rollout job's continuations), kept out of the list of imports.

    Re-importing a trajectory already present (same content hash) changes nothing. By
    default the import is all-or-nothing: if any record is malformed, nothing from the
    file is written, the batch is saved as failed with every error (location and field),
    and :class:`ImportRejected` is raised. With ``skip_invalid`` the good records are
    written and the bad ones reported.
    """
    parser_get(source_format, mapping)  # a bad format or mapping is said before any batch
    batch = ImportBatch.objects.create(
        project=project,
        file_name=path.name,
        source_format=source_format,
        created_by=user,
        started_at=timezone.now(),  # it runs at once
        mapping=mapping,
        skip_invalid=skip_invalid,
        file_size=_size(path),
        internal=internal,
    )
    _import_into(batch, lambda: prepare.file_chunks(path, batch.source_format, batch.mapping))
    return _finished(batch)


def _finished(batch: ImportBatch) -> ImportBatch:
    if batch.status == ImportBatch.Status.FAILED:
        raise ImportRejected(batch)
    if batch.created_count:
        # The search index is built afterwards, off the import's path (trajectories.search).
        project_id = batch.project_id
        transaction.on_commit(lambda: search_index_enqueue(project_id))
    return batch


def _size(path: Path) -> int:
    """A file's size, or a folder's (an OpenHands conversation): its files' together."""
    if path.is_dir():
        return sum(part.stat().st_size for part in path.rglob("*") if part.is_file())
    return path.stat().st_size


def trajectory_records_import(
    *,
    project: Project,
    records: list[Any] | TypedRecords,
    user: User | None = None,
    skip_invalid: bool = False,
) -> ImportBatch:
    """Import trajectories given as Stepscope-format records (an API push), at once: the
    records already read are checked and prepared in this process (no file, no second
    parse) and written by the same bulk writer as a file, all or nothing. Errors name a
    record by its index in the list (``record 3``) and the field. Records the typed
    reader decoded (:mod:`trajectories.formats.stepscope_typed`) are checked already."""
    batch = ImportBatch.objects.create(
        project=project,
        file_name="api-push",
        source_format="stepscope",
        created_by=user,
        started_at=timezone.now(),
        skip_invalid=skip_invalid,
    )
    chunks = prepare.prepared_chunks(
        records.parsed() if isinstance(records, TypedRecords) else stepscope.parse_records(records),
        "stepscope",
        trajectories=prepare.CHUNK_TRAJECTORIES,
        steps=PUSH_CHUNK_STEPS,
        size=prepare.CHUNK_BYTES,
    )
    # A push is over in well under a second: no progress figure (nor its connection) then,
    # and the tables it grew by much are analysed by a worker, not on the client's time.
    _import_into(
        batch,
        lambda: contextlib.nullcontext(chunks),
        progress_after=1.0,
        expected=len(records),
        statistics_later=_statistics_refresh_enqueue,
    )
    return _finished(batch)


def _statistics_refresh_enqueue(tables: list[str]) -> None:
    """Have a worker analyse the tables a push grew. A broker that is down costs only the
    minute until autovacuum does it."""
    from trajectories.tasks import statistics_refresh

    send_if_up(statistics_refresh, tables, what=f"statistics of {', '.join(tables)}")


def import_upload_start(
    *,
    project: Project,
    user: User,
    source_format: str,
    upload: UploadedFile,
    skip_invalid: bool = False,
    mapping: dict[str, Any] | None = None,
) -> ImportBatch:
    """Store an uploaded file and queue its import on the ``default`` queue."""
    from trajectories.tasks import import_run

    parser_get(source_format, mapping)  # fail now, not in the worker, on a bad format
    broker_require()  # a dead broker is said now, not left as a batch queued forever
    name = Path(upload.name or "upload").name[:200]
    folder = Path(settings.MEDIA_ROOT) / "imports" / uuid.uuid4().hex
    folder.mkdir(parents=True)
    stored = folder / name
    with stored.open("wb") as out:
        for piece in upload.chunks():
            out.write(piece)
    with transaction.atomic():
        batch = ImportBatch.objects.create(
            project=project,
            file_name=name,
            source_format=source_format,
            status=ImportBatch.Status.QUEUED,
            stored_path=str(stored),
            mapping=mapping,
            skip_invalid=skip_invalid,
            file_size=stored.stat().st_size,
            created_by=user,
        )
        transaction.on_commit(lambda: import_run.delay(batch.pk))
    return batch


def import_batch_cancel(*, batch: ImportBatch) -> ImportBatch:
    """Stop a queued or running import: nothing of it stays (it is one transaction)."""
    return job_cancel(batch)


def import_batch_run(*, batch_id: int) -> ImportBatch:
    """Run a queued import (the Celery task's body). Safe to run again after a worker
    died: the import is one transaction, so a rerun starts from a clean slate, and a
    finished batch is left as it is."""
    with transaction.atomic():
        batch = ImportBatch.objects.select_for_update().get(pk=batch_id)
        if not batch.is_active:
            if batch.status == ImportBatch.Status.CANCELLED and batch.stored_path:
                # Cancelled before a worker took it: its upload is not needed any more.
                shutil.rmtree(Path(batch.stored_path).parent, ignore_errors=True)
            return batch
        if batch.status == ImportBatch.Status.QUEUED:
            batch.started_at = timezone.now()
        batch.status = ImportBatch.Status.RUNNING
        batch.save(update_fields=["status", "started_at"])
    path = Path(batch.stored_path)
    problem = None
    try:
        parser_get(batch.source_format, batch.mapping)
    except ValueError as error:
        problem = RecordError(location="file", field="", message=str(error))
    if problem is None and not path.is_file():
        problem = RecordError(location="file", field="", message="the uploaded file is gone")
    if problem is not None:
        # Unless another delivery of this task ended it meanwhile, or it was cancelled.
        job_fail(
            ImportBatch,
            pk=batch.pk,
            error=problem.message,
            errors=[dataclasses.asdict(problem)],
            rejected_count=1,
        )
        batch.refresh_from_db()
        return batch
    _import_into(batch, lambda: prepare.file_chunks(path, batch.source_format, batch.mapping))
    shutil.rmtree(path.parent, ignore_errors=True)
    return batch


# Opens the prepared chunks of what an import reads (a file, or records already read).
ChunkSource = Callable[[], contextlib.AbstractContextManager[Iterator[prepare.Chunk]]]


def _import_into(
    batch: ImportBatch,
    source: ChunkSource,
    progress_after: float = 0.0,
    expected: int = 0,
    statistics_later: Callable[[list[str]], None] | None = None,
) -> None:
    """Import the chunks of ``source`` into the batch's project, all or nothing.
    ``expected``: how many records there are, where that is known (a push), so that the
    trajectory ids are taken at once. The tables the import grew by much (steps, labels,
    the majority) are analysed as soon as it commits, so the pages after it are not
    planned for the tables as they were (:mod:`stepscope.statistics`): here, or by
    ``statistics_later``."""
    counts = Counts()
    skip_invalid = batch.skip_invalid
    progress = ProgressWriter(
        "trajectories_importbatch", batch.pk, "processed_count", first_after=progress_after
    )
    try:
        with transaction.atomic():
            # One import per project at a time: the content-hash check and the COPY
            # must not interleave with another import of the same rows.
            locks.xact_lock(locks.LockClass.IMPORT, batch.project_id)
            # A task handed out twice (it ran past the broker's visibility timeout) waits
            # above while the first run finishes; then there is nothing left to do.
            # Or it was cancelled meanwhile.
            if not ImportBatch.objects.filter(pk=batch.pk, status__in=ImportBatch.ACTIVE).exists():
                raise _AlreadyFinished
            with (
                ChunkWriter(batch, counts, expected) as writer,
                source() as chunks,
            ):
                for chunk in chunks:
                    # A cancel is seen within about a second (when progress is written),
                    # and rolls back everything this import wrote.
                    if progress.report(len(chunk)) and progress.status() == "cancelled":
                        raise _AlreadyFinished
                    records = []
                    for item in chunk:
                        if isinstance(item, RecordError):
                            counts.errors.append(item)
                        else:
                            records.append(item)
                    if counts.errors and not skip_invalid:
                        continue  # keep parsing to report every error, write nothing more
                    writer.write(records)
                if counts.errors and not skip_invalid:
                    raise _Rollback
                writer.finish()
            link_parents(batch.project_id, counts.children)
            # The result is written with the rows, in the same commit: a batch is never
            # left running with its trajectories in, and a cancel that came after the
            # last check still rolls the import back.
            if not _result_save(batch, counts, progress.done, ImportBatch.Status.DONE):
                raise _AlreadyFinished
            _announce(batch, counts)
            analyze_when_grown(statistics_later)
            return
    except _AlreadyFinished:
        batch.refresh_from_db()
        return
    except _Rollback:
        counts.created = counts.steps = 0
    except FileError as error:
        counts.errors.append(RecordError(location="file", field="", message=str(error)))
        counts.created = counts.steps = 0
    finally:
        progress.close()
    # Nothing was written: only the errors are.
    if not _result_save(batch, counts, progress.done, ImportBatch.Status.FAILED):
        batch.refresh_from_db()


def _announce(batch: ImportBatch, counts: Counts) -> None:
    """The import's event, and its new trajectories' arrival, with its commit."""
    source = "push" if batch.file_name == "api-push" else "import"
    event_emit(
        project_id=batch.project_id,
        kind="import.done",
        data={
            "import": batch.pk,
            "file_name": batch.file_name,
            "format": batch.source_format,
            "created": counts.created,
            "unchanged": counts.unchanged,
            "rejected": len(counts.errors),
        },
    )
    if counts.created:
        trajectories_arrived(project_id=batch.project_id, import_batch_id=batch.pk, source=source)


def _result_save(batch: ImportBatch, counts: Counts, processed: int, status: str) -> bool:
    """Write the import's result on its batch, unless the batch is no longer active (it
    was cancelled); whether it was written."""
    return job_end(
        batch,
        status,
        created_count=counts.created,
        unchanged_count=counts.unchanged,
        rejected_count=len(counts.errors),
        step_count=counts.steps,
        processed_count=processed,
        errors=[dataclasses.asdict(e) for e in counts.errors[:MAX_ERRORS_KEPT]],
    )


class _AlreadyFinished(Exception):
    """Another run of the same batch finished while this one waited for the lock, or the
    batch was cancelled."""


class _Rollback(Exception):
    pass
