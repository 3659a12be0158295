"""The Celery app. Queues: ``default`` (CPU work) and ``gpu`` (anything that runs a model)."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery, Task
from kombu import Queue
from kombu.exceptions import OperationalError

from stepscope.queueing import QueueUnavailable

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")


class StepscopeTask(Task):
    """Publishing to a broker that is down raises ``QueueUnavailable`` (a clear page or
    API answer) after kombu's short publish retries, not a bare connection error."""

    def apply_async(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().apply_async(*args, **kwargs)
        except OperationalError as error:
            raise QueueUnavailable(str(error)[:200]) from error


app = Celery("stepscope", task_cls=StepscopeTask)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = (Queue("default"), Queue("gpu"))
app.autodiscover_tasks()


@app.task(name="stepscope.ping")
def ping(value: int) -> dict[str, int]:
    """A round trip through the broker and a worker, used by health checks and tests."""
    return {"value": value, "pid": os.getpid()}
