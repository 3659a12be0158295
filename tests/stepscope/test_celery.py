import os

import pytest

from stepscope.celery import app, ping


@pytest.mark.celery
def test_task_round_trips_through_a_real_worker(celery_worker) -> None:
    result = ping.delay(41)
    payload = result.get(timeout=30)
    assert payload["value"] == 41
    # It ran in the worker's process, not eagerly in ours.
    assert payload["pid"] != os.getpid()


@pytest.mark.celery
def test_gpu_queue_is_consumed(celery_worker) -> None:
    result = ping.apply_async(args=[7], queue="gpu")
    assert result.get(timeout=30)["value"] == 7


def test_tasks_do_not_run_eagerly() -> None:
    assert app.conf.task_always_eager is False
    assert {q.name for q in app.conf.task_queues} == {"default", "gpu"}
