"""Kept summaries (evaluation/kept.py): the failure overview and the compare metrics are
made once and shown again until a label, score run, member or trajectory of their project
changes; a large project's are made by a worker while the page shows the kept one, or says
it is being made."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from evaluation import kept
from evaluation.models import KeptSummary
from labeling.models import StepLabel
from tests.evaluation.test_compare import build
from tests.factories import trajectory_with_steps
from tests.waiting import wait_until
from trajectories.models import Project
from trajectories.services import project_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def compared(project: Project) -> Project:
    build(project, [1, 1, -1, 0], [0.9, 0.6, 0.3, 0.2], external_id="A", success=False)
    build(project, [1, -1, 1], [0.8, 0.7, 0.4], external_id="B", success=False)
    build(project, [1, 1], [0.9, 0.55], external_id="C", success=True)
    return project


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The summaries made (the real making, counted), by page."""
    calls: list[str] = []
    for page, (make, names) in list(kept.SUMMARIES.items()):

        def counted(project: Project, params: Any, make: Any = make, page: str = page) -> Any:
            calls.append(page)
            return make(project, params)

        monkeypatch.setitem(kept.SUMMARIES, page, (counted, names))
    return calls


def stats(html: str) -> dict[str, int]:
    return {
        label: int(value)
        for value, label in re.findall(
            r'stat-value">(\d+)</span><span class="stat-label">([^<]+)<', html
        )
    }


def failures_page(client: Client) -> str:
    response = client.get(reverse("failure-overview", args=["demo"]))
    assert response.status_code == 200
    return response.content.decode()


def test_the_failure_summary_is_made_once_until_a_label_of_its_project_changes(
    compared: Project, owner: User, client: Client, made: list[str]
) -> None:
    client.force_login(owner)
    assert stats(failures_page(client))["first error located"] == 2
    assert stats(failures_page(client))["first error located"] == 2
    assert made == ["failures"]

    # A label in another project leaves it as it is.
    other = project_create(slug="other", name="Other")
    build(other, [-1], [0.5], annotator="elsewhere", success=False)
    failures_page(client)
    assert made == ["failures"]

    # B's error relabelled good: made again, and the page says so.
    StepLabel.objects.filter(step__trajectory__external_id="B", value=-1).update(value=1)
    assert stats(failures_page(client))["first error located"] == 1
    assert made == ["failures", "failures"]


def test_compare_is_kept_per_parameters(
    compared: Project, owner: User, client: Client, made: list[str]
) -> None:
    client.force_login(owner)
    url = reverse("compare", args=["demo"])
    at_half = client.get(url, {"scorer": "prm", "threshold": "0.5"}).content.decode()
    at_high = client.get(url, {"scorer": "prm", "threshold": "0.95"}).content.decode()
    again = client.get(url, {"scorer": "prm", "threshold": "0.5"}).content.decode()
    assert made == ["compare", "compare"]
    assert KeptSummary.objects.filter(project=compared, page="compare").count() == 2
    matrix = re.compile(r'data-cell="([^"]+)"[^>]*>(\d+)<')
    assert matrix.findall(at_half) == matrix.findall(again) != matrix.findall(at_high)


def test_a_large_projects_summary_waits_for_a_worker_and_says_so(
    compared: Project, owner: User, client: Client, made: list[str], settings: Any
) -> None:
    """Past STEPSCOPE_SUMMARY_INLINE_STEPS the request makes nothing: it queues the making
    (once, however many readers) and the page says the summary is on its way, polling for
    it. The worker's task (run here as the worker runs it) keeps it for the next reader."""
    settings.STEPSCOPE_SUMMARY_INLINE_STEPS = 0
    client.force_login(owner)
    html = failures_page(client)
    assert "a worker is counting this summary" in html
    assert 'hx-trigger="every 3s"' in html
    assert "failure-stats" not in html
    failures_page(client)
    assert made == []
    row = KeptSummary.objects.get(project=compared, page="failures")
    assert row.refreshing_since is not None

    assert kept.summary_refresh(project_id=compared.pk, page="failures", params=row.params)
    html = failures_page(client)
    assert stats(html)["first error located"] == 2
    assert "every 3s" not in html

    # Out of date: the kept figures stay on the page, with their age, while it is remade.
    StepLabel.objects.filter(step__trajectory__external_id="B", value=-1).update(value=1)
    html = failures_page(client)
    assert stats(html)["first error located"] == 2
    assert "a worker is counting them again" in html
    assert made == ["failures"]


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_worker_makes_the_large_projects_summary(
    compared: Project, owner: User, client: Client, celery_worker: object, settings: Any
) -> None:
    settings.STEPSCOPE_SUMMARY_INLINE_STEPS = 0
    client.force_login(owner)
    assert "a worker is counting this summary" in failures_page(client)
    assert wait_until(lambda: "failure-stats" in failures_page(client), timeout=60)
    assert stats(failures_page(client))["first error located"] == 2


def home_page(client: Client) -> str:
    response = client.get(reverse("project-home", args=["demo"]))
    assert response.status_code == 200
    return response.content.decode()


def test_the_project_homes_step_counts_are_kept_and_a_large_projects_counted_by_a_worker(
    compared: Project, owner: User, client: Client, made: list[str], settings: Any
) -> None:
    """The home's labelable and labelled step counts are passes over every step (1.4 s at
    a million, #37): kept like the other summaries. The trajectory and step totals come
    from the trajectory rows, read each time, never from the step table."""
    client.force_login(owner)
    small = stats(home_page(client))
    assert (small["steps"], small["labelable steps"], small["labelled steps"]) == (9, 9, 9)
    # A small project's are counted in the request and not kept: the home writes nothing
    # (a read that wrote would pin its reader to the primary where a replica serves).
    with CaptureQueriesContext(connection) as queries:
        home_page(client)
    writes = [q["sql"] for q in queries if q["sql"].startswith(("INSERT", "UPDATE", "DELETE"))]
    assert writes == [] and not KeptSummary.objects.filter(page="home").exists()
    assert made == ["home", "home"]

    settings.STEPSCOPE_SUMMARY_INLINE_STEPS = 0
    StepLabel.objects.filter(step__trajectory__external_id="C").delete()
    with CaptureQueriesContext(connection) as queries:
        html = home_page(client)
    # No pass over the steps: only the marks' look-up of the steps a label event names.
    counted = [q["sql"] for q in queries if "COUNT(" in q["sql"] and "_step" in q["sql"]]
    assert not counted, counted
    assert 'hx-trigger="every 3s"' in html
    assert "a worker is counting this summary" in html
    row = KeptSummary.objects.get(project=compared, page="home")
    assert kept.summary_refresh(project_id=compared.pk, page="home", params=row.params)
    assert stats(home_page(client))["labelled steps"] == 7
    # A label changes: the kept figures stay, with the totals of now beside them.
    StepLabel.objects.filter(step__trajectory__external_id="B").delete()
    html = home_page(client)
    assert "a worker is counting them again" in html
    assert (stats(html)["labelled steps"], stats(html)["trajectories"]) == (7, 3)

    assert kept.summary_refresh(project_id=compared.pk, page="home", params=row.params)
    html = home_page(client)
    assert stats(html)["labelled steps"] == 4
    assert "every 3s" not in html


def test_a_large_projects_agreement_between_humans_is_counted_by_a_worker(
    compared: Project, owner: User, client: Client, settings: Any
) -> None:
    """Agreement between humans reads every label of the schema into the web process (2 s
    at a million steps, #37): past STEPSCOPE_SUMMARY_INLINE_STEPS a worker makes it. A
    schema the project lacks is said at once, not left to the worker."""
    settings.STEPSCOPE_SUMMARY_INLINE_STEPS = 0
    client.force_login(owner)
    url = reverse("compare-humans", args=["demo"])
    html = client.get(url).content.decode()
    assert "a worker is counting this summary" in html
    assert "No step has labels from two annotators" not in html
    assert "no label schema" in client.get(url, {"schema": "nope"}).content.decode().lower()

    row = KeptSummary.objects.get(project=compared, page="humans")
    assert kept.summary_refresh(project_id=compared.pk, page="humans", params=row.params)
    html = client.get(url).content.decode()
    assert "No step has labels from two annotators" in html
    assert "counting" not in html


def test_a_large_projects_disagreements_are_sorted_by_a_worker(
    compared: Project, owner: User, client: Client, settings: Any
) -> None:
    """The disagreements page sorts every disagreeing step of the project by its gap (3 s
    at a million steps, #37): kept per page and filters; a worker makes a large project's."""
    settings.STEPSCOPE_SUMMARY_INLINE_STEPS = 0
    client.force_login(owner)
    url = reverse("compare-disagreements", args=["demo"])
    html = client.get(url, {"scorer": "prm"}).content.decode()
    assert "a worker is counting this summary" in html
    assert 'id="disagreements"' not in html and "No disagreements this large" not in html

    row = KeptSummary.objects.get(project=compared, page="disagreements")
    assert row.params == {"scorer": "prm"}
    assert kept.summary_refresh(project_id=compared.pk, page="disagreements", params=row.params)
    html = client.get(url, {"scorer": "prm"}).content.decode()
    assert 'id="disagreements"' in html and "counting" not in html
    # Another filter is another summary.
    assert (
        "a worker is counting"
        in client.get(url, {"scorer": "prm", "kind": "missed"}).content.decode()
    )


@pytest.mark.django_db
def test_small_means_at_most_the_inline_steps(settings: Any) -> None:
    """The bound on a project's steps that makes a summary in the request, summed over
    its trajectories (largest first, stopping once past it): equal is small, one more
    is not, and another project's steps do not count."""
    project = project_create(slug="bound", name="bound")
    other = project_create(slug="other", name="other")
    for owner, lengths in ((project, (5, 3, 2)), (other, (50,))):
        for number, length in enumerate(lengths):
            trajectory_with_steps(owner, [f"s{i}" for i in range(length)], external_id=f"t{number}")
    settings.STEPSCOPE_SUMMARY_INLINE_STEPS = 10
    assert kept._inline(project)
    settings.STEPSCOPE_SUMMARY_INLINE_STEPS = 9
    assert not kept._inline(project)
    settings.STEPSCOPE_SUMMARY_INLINE_STEPS = 0
    assert kept._inline(project_create(slug="empty", name="empty"))
