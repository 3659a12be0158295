"""Celery tasks of the exports app: thin wrappers that take ids. The task keeps the name
it had when exports lived in trajectories, so queued messages still find it."""

from __future__ import annotations

from celery import shared_task

from exports.services import export_job_run


@shared_task(name="trajectories.export_run", acks_late=True)
def export_run(job_id: int) -> dict[str, int | str]:
    job = export_job_run(job_id=job_id)
    return {"job": job.pk, "status": job.status, "rows": job.row_count}
