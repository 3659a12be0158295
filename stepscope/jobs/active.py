"""Every kind of background job in one list, for the admins' status page. The kinds are
the concrete models built on :class:`stepscope.jobs.models.Job`, so a new kind shows
here without being named."""

from __future__ import annotations

from typing import Any

from django.apps import apps

from stepscope.jobs.models import ACTIVE, Job

LIMIT = 50


def job_models() -> list[type[Job]]:
    """The concrete job models, in the order their apps are installed."""
    return [model for model in apps.get_models() if issubclass(model, Job)]


def jobs_active() -> list[dict[str, Any]]:
    """Queued and running jobs of every kind, oldest first, at most ``LIMIT`` per kind."""
    jobs: list[dict[str, Any]] = []
    for model in job_models():
        # Every concrete job belongs to a project; the abstract base cannot say so.
        manager: Any = model._default_manager
        rows = (
            manager.filter(status__in=ACTIVE)
            .select_related("project")
            .order_by("created_at")[:LIMIT]
        )
        counted = {"done", "total"} <= {field.name for field in model._meta.fields}
        for row in rows:
            jobs.append(
                {
                    "kind": model.KIND,
                    "id": row.pk,
                    "project": row.project.slug,
                    "status": row.status,
                    "created_at": row.created_at,
                    "done": row.done if counted else None,
                    "total": row.total if counted else None,
                }
            )
    jobs.sort(key=lambda job: job["created_at"])
    return jobs
