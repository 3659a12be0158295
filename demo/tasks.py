"""The demo's showcase on the worker: each run of the task starts what is ready
(:func:`demo.showcase.showcase_advance`) and, while anything is pending, comes back a few
seconds later, for at most half an hour."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from stepscope.jobs.retry import REDELIVERABLE

# Pending stages are checked again every STEPSCOPE_DEMO_ADVANCE_SECONDS (5 s).
GIVE_UP_AFTER_SECONDS = 1800


@shared_task(name="demo.showcase_advance", **REDELIVERABLE)
def showcase_advance(project_id: int, user_id: int, labels: str, run: int = 0) -> list[str]:
    # Here, not at the top: the showcase loads torch, and the web process imports every
    # tasks module (to send their tasks).
    from django.contrib.auth.models import User

    from demo import showcase
    from trajectories.models import Project

    project = Project.objects.get(pk=project_id)
    pending = showcase.showcase_advance(
        project=project, user=User.objects.get(pk=user_id), labels=labels
    )
    again = settings.STEPSCOPE_DEMO_ADVANCE_SECONDS
    if pending and (run + 1) * again <= GIVE_UP_AFTER_SECONDS:
        showcase_advance.apply_async(
            args=[project_id, user_id, labels, run + 1],
            countdown=again,
            queue="default",
        )
    return pending
