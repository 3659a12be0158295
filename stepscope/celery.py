"""The Celery app. Queues: ``default`` (CPU work) and ``gpu`` (anything that runs a model)."""

from __future__ import annotations

import os

from celery import Celery
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

app = Celery("stepscope")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = (Queue("default"), Queue("gpu"))
app.autodiscover_tasks()


@app.task(name="stepscope.ping")
def ping(value: int) -> dict[str, int]:
    """A round trip through the broker and a worker, used by health checks and tests."""
    return {"value": value, "pid": os.getpid()}
