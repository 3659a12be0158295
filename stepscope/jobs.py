"""Every kind of background job in one list, for the admins' status page."""

from __future__ import annotations

from typing import Any

from django.apps import apps

# (label, model, the field that counts progress or None)
JOB_MODELS = (
    ("import", "trajectories.ImportBatch", None),
    ("export", "trajectories.ExportJob", "done"),
    ("scoring", "scoring.ScoringRun", "done"),
    ("attribution", "scoring.AttributionRun", "done"),
    ("rollout", "rollouts.RolloutJob", "done"),
)
ACTIVE = ("queued", "running")
LIMIT = 50


def jobs_active() -> list[dict[str, Any]]:
    """Queued and running jobs of every kind, oldest first, at most ``LIMIT`` per kind."""
    jobs: list[dict[str, Any]] = []
    for kind, label, progress in JOB_MODELS:
        model = apps.get_model(label)
        rows = (
            model.objects.filter(status__in=ACTIVE)
            .select_related("project")
            .order_by("created_at")[:LIMIT]
        )
        for row in rows:
            jobs.append(
                {
                    "kind": kind,
                    "id": row.pk,
                    "project": row.project.slug,
                    "status": row.status,
                    "created_at": row.created_at,
                    "done": getattr(row, progress) if progress else None,
                    "total": getattr(row, "total", None) if progress else None,
                }
            )
    jobs.sort(key=lambda job: job["created_at"])
    return jobs
