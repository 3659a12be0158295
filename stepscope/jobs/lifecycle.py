"""The states a job moves through, written once for every kind: a chunk claimed by a
worker (which starts its job), a job ended with its result, failed or cancelled. Each
change is one conditional ``UPDATE``, so a job that has already ended stays as it ended."""

from __future__ import annotations

from typing import Any, TypeVar

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from stepscope.jobs.models import ACTIVE, Chunk, Job, JobStatus, ProgressJob
from stepscope.jobs.retry import MAX_CHUNK_ATTEMPTS

J = TypeVar("J", bound=Job)


# The most of an error kept on a failed job, for its page and the API.
ERROR_KEPT = 4000


def job_error_text(error: str | BaseException) -> str:
    """What a failed job says: a message as written, or an exception as ``Type: message``,
    cut to ``ERROR_KEPT`` characters."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return text[:ERROR_KEPT]


def job_fail(model: type[Job], *, pk: int, error: str | BaseException, **result: Any) -> bool:
    """End an active job as failed with ``error`` (:func:`job_error_text`) and the fields of
    its model in ``result`` (what it had done), in the caller's transaction where there is
    one. The one way every kind fails a job: whether it was still active (a job cancelled
    or ended meanwhile stays as it ended)."""
    updated: int = model._default_manager.filter(pk=pk, status__in=ACTIVE).update(
        status=JobStatus.FAILED, error=job_error_text(error), finished_at=timezone.now(), **result
    )
    return bool(updated)


def job_end(job: J, status: str, **result: Any) -> bool:
    """End an active job with ``status`` and its ``result`` (fields of its model), in the
    caller's transaction where there is one, and set them on ``job`` too; whether it was
    still active (a job cancelled meanwhile stays cancelled, and the caller can roll
    back what it wrote)."""
    values = {"status": status, "finished_at": timezone.now(), **result}
    if not type(job)._default_manager.filter(pk=job.pk, status__in=ACTIVE).update(**values):
        return False
    for name, value in values.items():
        setattr(job, name, value)
    return True


def job_cancel(job: J) -> J:
    """Stop a queued or running job: chunks not yet finished are skipped; what is
    written stays."""
    type(job)._default_manager.filter(pk=job.pk, status__in=ACTIVE).update(
        status=JobStatus.CANCELLED, finished_at=timezone.now()
    )
    job.refresh_from_db()
    return job


def project_jobs_cancel(project_id: int, *, keep: tuple[type[Job], ...] = ()) -> dict[str, int]:
    """Cancel every queued or running job of the project, of every kind (the concrete job
    models the app registry knows, so kinds of higher apps too), except the kinds in
    ``keep``; each kind's tasks see the status and stop, as after its own Cancel button.
    Returns the number cancelled per kind (``KIND``), without zeros."""
    from stepscope.jobs.active import job_models

    cancelled: dict[str, int] = {}
    now = timezone.now()
    for model in job_models():
        if model in keep or "project" not in {f.name for f in model._meta.fields}:
            continue
        manager: Any = model._default_manager
        count = manager.filter(project_id=project_id, status__in=ACTIVE).update(
            status=JobStatus.CANCELLED, finished_at=now
        )
        if count:
            kind = model.KIND or str(model._meta.verbose_name)
            cancelled[kind] = cancelled.get(kind, 0) + count
    return cancelled


def chunk_claim(chunk: Chunk, job: ProgressJob) -> bool:
    """Count one more delivery of ``chunk`` and start its job if it was queued. False,
    after failing the job, when the chunk has now been started more than
    ``MAX_CHUNK_ATTEMPTS`` times (its worker died each time)."""
    with transaction.atomic():
        type(chunk)._default_manager.filter(pk=chunk.pk).update(attempts=F("attempts") + 1)
        type(job)._default_manager.filter(pk=job.pk, status=JobStatus.QUEUED).update(
            status=JobStatus.RUNNING, started_at=timezone.now()
        )
    if chunk.attempts + 1 > MAX_CHUNK_ATTEMPTS:
        job_fail(
            type(job),
            pk=job.pk,
            error=f"chunk {chunk.number} was started {MAX_CHUNK_ATTEMPTS} times and never"
            " finished (its worker died each time: out of memory?)",
        )
        return False
    return True
