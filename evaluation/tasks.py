"""Celery tasks of the evaluation app: thin wrappers that take ids."""

from __future__ import annotations

from celery import shared_task

from evaluation.kept import summary_refresh


@shared_task(name="evaluation.summary_refresh", acks_late=True)
def summary_refresh_task(project_id: int, page: str, params: dict[str, str]) -> bool:
    return summary_refresh(project_id=project_id, page=page, params=params)
