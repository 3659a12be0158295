"""A failure-mode run queued on a real worker (apart from test_failure_modes.py, whose
tests share rows in a transaction this test's commits would end)."""

from __future__ import annotations

from typing import Any

import pytest

from discovery.mode_services import failure_mode_run_start
from discovery.models import FailureModeRun
from tests.discovery.test_failure_modes import THEMES, failed_run
from tests.waiting import wait_until
from trajectories.services import project_create


@pytest.mark.django_db(transaction=True)
def test_a_worker_runs_the_queued_run(celery_worker: Any) -> None:
    project = project_create(slug="worked", name="Worked")
    for theme, texts in THEMES.items():
        for i, text in enumerate(texts):
            failed_run(project, f"{theme}{i}", text)
    run = failure_mode_run_start(project=project, user=None)
    assert wait_until(lambda: FailureModeRun.objects.get(pk=run.pk).status == "done", timeout=120)
    run.refresh_from_db()
    assert (run.total, run.k) == (9, 3) and run.started_at and run.finished_at
