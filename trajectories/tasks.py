"""Celery tasks of the trajectories app: thin wrappers that take ids."""

from __future__ import annotations

from celery import shared_task

from stepscope.statistics import analyze
from trajectories.services import import_batch_run
from trajectories.services.assembly import live_traces_assemble
from trajectories.services.deletion import project_deletion_run
from trajectories.services.follow import follow_sweep
from trajectories.services.live import live_sweep
from trajectories.services.search import trajectory_search_index


@shared_task(name="trajectories.import_run", acks_late=True)
def import_run(batch_id: int) -> dict[str, int | str]:
    batch = import_batch_run(batch_id=batch_id)
    return {"batch": batch.pk, "status": batch.status, "created": batch.created_count}


@shared_task(name="trajectories.search_index", acks_late=True)
def search_index(project_id: int) -> int:
    return trajectory_search_index(project_id=project_id)


@shared_task(name="trajectories.project_delete", acks_late=True)
def project_delete(deletion_id: int) -> int:
    project_deletion_run(deletion_id=deletion_id)
    return deletion_id


@shared_task(name="trajectories.statistics_refresh")
def statistics_refresh(tables: list[str]) -> list[str]:
    return analyze(tables)


@shared_task(name="trajectories.live_assemble", acks_late=True, reject_on_worker_lost=True)
def live_assemble() -> int:
    return live_traces_assemble()


@shared_task(name="trajectories.live_sweep")
def live_sweep_task() -> bool:
    return live_sweep()


@shared_task(name="trajectories.follow_sweep")
def follow_sweep_task() -> int:
    """A pass over every folder followed in the app (Celery beat, every STEPSCOPE_SWEEP_SECONDS)."""
    return len(follow_sweep())
