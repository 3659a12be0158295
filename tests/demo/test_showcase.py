"""The demo's showcase (``demo_setup`` then a real worker): with no command typed, the demo
project gets a queue with an item leased to the demo user at once, then on the worker a
trained head and a small PRM that score every labelable step, two credit runs and one
finished export of each main format; the compare page has numbers and the failures page
first errors. Rollouts are left out (``--rollout-tasks 0``): tests/rollouts cover them.

Then the demo's main pages as a person sees them, in Chromium at a laptop's and a phone's
size: each has one h1, every form control a label, no page is wider than the screen, and
the data the showcase made is on it. With ``STEPSCOPE_SHOTS=docs/screenshots`` the
pictures in the README are taken here. One test does both: the showcase is most of a
minute of worker time, made once."""

from __future__ import annotations

import re
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from demo import showcase
from demo.management.commands import demo_setup
from exports.models import ExportJob
from labeling.models import Queue, QueueAssignment
from scoring.models import AttributionRun, Scorer, StepCredit, StepScore
from tests.browser import sign_in
from tests.conftest import celery_worker_log
from tests.screens import UNLABELLED, WIDEST, shot
from tests.waiting import wait_until
from trajectories import synthetic
from trajectories.models import Project, Step, Trajectory

pytestmark = [pytest.mark.browser, pytest.mark.celery, pytest.mark.django_db(transaction=True)]

SIZES = {"laptop": (1440, 900), "phone": (390, 844)}


def stat(html: str, label: str) -> int:
    found = re.findall(r'stat-value">(\d+)</span><span class="stat-label">([^<]+)<', html)
    return dict((name, int(value)) for value, name in found)[label]


def test_the_showcase_fills_every_view_and_its_pages_read_well_at_both_sizes(
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
    user = User.objects.get(username=demo_setup.DEMO_USER)

    # At once, before any worker: the demo queue, its first item leased to the demo user.
    queue = Queue.objects.get(project=project, name=showcase.QUEUE)
    held = QueueAssignment.objects.filter(item__queue=queue, annotator=user)
    assert held.filter(status=QueueAssignment.Status.LEASED).count() == 1

    def exported() -> bool:
        jobs = ExportJob.objects.filter(project=project, format__in=showcase.EXPORTS)
        return jobs.count() == 3 and not jobs.filter(status__in=ExportJob.ACTIVE).exists()

    assert wait_until(exported, timeout=280), celery_worker_log()
    labelable = Step.objects.filter(trajectory__project=project, labelable=True).count()
    for name in (showcase.HEAD, showcase.PRM):
        scorer = Scorer.objects.filter(project=project, name=name).latest("id")
        assert StepScore.objects.filter(scorer=scorer).count() == labelable, name
    for run in AttributionRun.objects.filter(project=project):
        assert run.status == AttributionRun.Status.DONE, run.error
        assert StepCredit.objects.filter(run=run).exists()
    assert AttributionRun.objects.filter(project=project).count() == 2
    for job in ExportJob.objects.filter(project=project):
        assert job.status == ExportJob.Status.DONE, job.error
        assert job.row_count > 0 and job.files

    client = Client()
    client.force_login(user)
    compare = client.get(
        reverse("compare", args=["demo"]),
        {"scorer": showcase.HEAD, "labels": synthetic.TRUTH_ANNOTATOR},
    ).content.decode()
    assert 'id="confusion"' in compare and 'id="metric-kappa"' in compare
    failures = client.get(reverse("failure-overview", args=["demo"])).content.decode()
    assert stat(failures, "first error located") > 0
    _pages_read_well_at_both_sizes(page, live_server, project)


def _pages_read_well_at_both_sizes(page: Any, live_server: Any, project: Project) -> None:
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
