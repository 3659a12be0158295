"""The demo's main pages as a person sees them, in Chromium at a laptop's and a phone's
size, once the showcase has run on a real worker: each has one h1, every form control a
label, no page is wider than the screen, and the data the showcase made is on it. With
``STEPSCOPE_SHOTS=docs/screenshots`` the pictures in the README are taken here."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

from demo import showcase
from demo.management.commands import demo_setup
from exports.models import ExportJob
from labeling.models import Queue
from tests.browser import sign_in
from tests.conftest import celery_worker_log
from tests.screens import UNLABELLED, WIDEST, shot
from tests.waiting import wait_until
from trajectories import synthetic
from trajectories.models import Project, Trajectory

pytestmark = [pytest.mark.browser, pytest.mark.celery, pytest.mark.django_db(transaction=True)]

SIZES = {"laptop": (1440, 900), "phone": (390, 844)}


def test_the_demo_pages_read_well_at_both_sizes(
    page: Any,
    live_server: Any,
    celery_worker: Any,
    settings: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.DATA_DIR = tmp_path
    monkeypatch.setattr(demo_setup, "REAL_PROJECTS", [])
    call_command("demo_setup", tasks=3, rollout_tasks=0, stdout=StringIO())
    project = Project.objects.get(slug="demo")

    def exported() -> bool:
        jobs = ExportJob.objects.filter(project=project)
        return jobs.count() == 3 and not jobs.filter(status__in=ExportJob.ACTIVE).exists()

    assert wait_until(exported, timeout=280), celery_worker_log()
    failed = Trajectory.objects.filter(project=project, success=False).order_by("id").first()
    assert failed is not None
    queue = Queue.objects.get(project=project, name=showcase.QUEUE)
    pages = {
        "home": (reverse("project-home", args=["demo"]), "#project-stats"),
        "trajectory": (reverse("trajectory-detail", args=[failed.pk]), "#steps .step"),
        "compare": (
            reverse("compare", args=["demo"])
            + f"?scorer={showcase.HEAD}&labels={synthetic.TRUTH_ANNOTATOR}",
            "#confusion",
        ),
        "failures": (reverse("failure-overview", args=["demo"]), ".stat"),
        "queue": (reverse("queue-detail", args=[queue.pk]), "main"),
        "exports": (reverse("export-list", args=["demo"]), "main table"),
    }
    sign_in(page, live_server, demo_setup.DEMO_USER, demo_setup.DEMO_PASSWORD)
    page.wait_for_url(live_server.url + "/")
    for size, (width, height) in SIZES.items():
        page.set_viewport_size({"width": width, "height": height})
        for name, (url, shows) in pages.items():
            page.goto(live_server.url + url)
            page.wait_for_selector(shows)
            shot(page, f"{name}-{size}")
            where = f"{name} at {width}px"
            assert page.locator("h1").count() == 1, where
            assert page.evaluate(UNLABELLED) == [], where
            overflow = page.evaluate("document.documentElement.scrollWidth")
            assert overflow <= width, f"{where} is {overflow}px wide: " + str(
                page.evaluate(WIDEST, width)
            )
