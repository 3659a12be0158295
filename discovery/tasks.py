"""Celery tasks for semantic search: thin wrappers that take ids and call a service."""

from __future__ import annotations

from celery import shared_task

from discovery import mode_services, note_services, services
from stepscope.jobs.retry import REDELIVERABLE


@shared_task(name="discovery.embed", **REDELIVERABLE)
def embed(project_id: int, trajectory_ids: list[int], import_batch_id: int | None) -> int:
    return services.embeddings_build(
        project_id=project_id,
        trajectory_ids=trajectory_ids or None,
        import_batch_id=import_batch_id,
    ).steps


@shared_task(name="discovery.failure_modes", **REDELIVERABLE)
def failure_modes_run(run_id: int) -> dict[str, int | str]:
    run = mode_services.failure_modes_execute(run_id=run_id)
    return {"run": run.pk, "status": run.status, "modes": run.k}


@shared_task(name="discovery.notes_group", **REDELIVERABLE)
def notes_group(run_id: int) -> dict[str, int | str]:
    run = note_services.notes_execute(run_id=run_id)
    return {"run": run.pk, "status": run.status, "groups": run.k}


@shared_task(name="discovery.question_answer", **REDELIVERABLE)
def question_answer(question_id: int) -> None:
    from discovery.question_services import question_run

    question_run(question_id)
