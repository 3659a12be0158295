"""Shared by the scoring and attribution commands: find the project, wait for a run,
summarise it."""

from __future__ import annotations

import time
from typing import Any, TypeVar

from django.core.management.base import CommandError

from scoring.models import AttributionRun, ScoringRun
from trajectories.models import Project


def project_or_error(slug: str) -> Project:
    project = Project.objects.filter(slug=slug).first()
    if project is None:
        raise CommandError(f"no project {slug!r}")
    return project


RunT = TypeVar("RunT", ScoringRun, AttributionRun)


def wait_for(run: RunT, *, timeout: float, poll: float = 0.5) -> RunT:
    """Poll the database until the run leaves queued/running (workers do the work)."""
    deadline = time.monotonic() + timeout
    while True:
        run.refresh_from_db()
        if not run.is_active:
            return run
        if time.monotonic() > deadline:
            raise CommandError(
                f"run {run.pk} still {run.status} after {timeout:.0f}s ({run.done}/{run.total});"
                " is a worker consuming its queue?"
            )
        time.sleep(poll)


def run_summary(run: ScoringRun) -> dict[str, Any]:
    summary = {
        "run": run.pk,
        "kind": run.kind,
        "status": run.status,
        "scorer": run.scorer.name if run.scorer else run.parameters.get("name"),
        "scorer_id": run.scorer_id,
        "revision": run.scorer.revision if run.scorer else None,
        "total": run.total,
        "done": run.done,
        "truncated": run.truncated,
        "steps_per_second": (
            round(run.steps_per_second, 2) if run.steps_per_second is not None else None
        ),
        "error": run.error or None,
    }
    if run.prompt_id is not None:  # a judge run: its mode, prompt version and cost
        summary["judge"] = run.metrics
    return summary
