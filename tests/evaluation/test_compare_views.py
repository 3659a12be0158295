"""The compare pages: every number links to the steps behind it, the disagreement list and
its one-click review queue, the failure overview; outsiders get 404 on each of them."""

from __future__ import annotations

import re
from html import unescape
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.models import Queue, QueueItem, StepLabel
from tests.evaluation.test_compare import build
from trajectories.models import Project, Step, Trajectory

pytestmark = pytest.mark.django_db

PAGES = [
    ("compare", {}),
    ("compare-steps", {"label": "-1", "predicted": "good"}),
    ("compare-first-errors", {"outcome": "wrong"}),
    ("compare-humans", {}),
    ("compare-disagreements", {}),
    ("failure-overview", {}),
    ("failure-list", {"grouping": "position", "value": "1"}),
]


@pytest.fixture
def compared(project: Project) -> Project:
    """The hand-worked trajectories of test_compare (A, B succeed or fail as below) with
    error tags on the humans' bad steps."""
    build(project, [1, 1, -1, 0], [0.9, 0.6, 0.3, 0.2], external_id="A", success=False)
    build(project, [1, -1, 1], [0.8, 0.7, 0.4], external_id="B", success=False)
    build(project, [1, 1], [0.9, 0.55], external_id="C", success=True)
    StepLabel.objects.filter(step__trajectory__external_id="A", value=-1).update(
        tags=["calculation error"]
    )
    return project


def get(client: Client, name: str, params: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    return client.get(reverse(name, args=["demo"]), {"scorer": "prm", **(params or {})}, **kwargs)


def links(html: str, pattern: str) -> list[str]:
    return [unescape(href) for href in re.findall(rf'href="([^"]*{pattern}[^"]*)"', html)]


@pytest.mark.parametrize(("name", "params"), PAGES)
def test_outsider_gets_404(
    compared: Project, outsider: User, client: Client, name: str, params: dict[str, Any]
) -> None:
    client.force_login(outsider)
    assert get(client, name, params).status_code == 404


def test_outsider_cannot_make_a_queue(compared: Project, outsider: User, client: Client) -> None:
    client.force_login(outsider)
    response = client.post(reverse("compare-disagreement-queue", args=["demo"]) + "?scorer=prm")
    assert response.status_code == 404
    assert not Queue.objects.exists()


@pytest.mark.parametrize(("name", "params"), PAGES)
def test_owner_sees_every_page(
    compared: Project, owner: User, client: Client, name: str, params: dict[str, Any]
) -> None:
    client.force_login(owner)
    assert get(client, name, params).status_code == 200


def test_compare_page_shows_the_matrix_and_plots_linking_to_their_steps(
    compared: Project, owner: User, client: Client
) -> None:
    client.force_login(owner)
    html = get(client, "compare").content.decode()
    assert 'id="confusion"' in html
    assert 'id="metric-kappa">0.308<' in html
    for chart in ("calibration", "sweep", "by-length", "by-position"):
        assert f'id="chart-{chart}"' in html
    # The cell "humans bad, model good" holds B1 only; its link lists exactly that step.
    (cell,) = re.findall(r'<a href="([^"]+)" data-cell="bad-good"', html)
    steps_page = client.get(unescape(cell)).content.decode()
    b1 = Step.objects.get(trajectory__external_id="B", index=1)
    assert re.findall(r'id="compare-step-(\d+)"', steps_page) == [str(b1.pk)]
    assert f"/t/{b1.trajectory_id}/#step-{b1.pk}" in steps_page
    # A calibration point: the bin of .3 holds A2.
    points = links(html, "decided=1")
    assert len(points) == 6  # the non-empty bins: .3 / .4 / .55 and .6 / .7 / .8 / .9
    a2 = Step.objects.get(trajectory__external_id="A", index=2)
    assert any(
        re.findall(r'id="compare-step-(\d+)"', client.get(p).content.decode()) == [str(a2.pk)]
        for p in points
    )
    # A point of the position curve lists every scored step at that position.
    position_zero = [p for p in links(html, "position=0") if "outcome" not in p]
    (first,) = position_zero
    listed = re.findall(r'id="compare-step-(\d+)"', client.get(first).content.decode())
    assert len(listed) == 3
    # A point of the threshold sweep lists the trajectories whose first error it misses.
    sweep_point = next(
        p for p in links(html, "compare/first-errors/") if "threshold=0.5&subset=all&" in p
    )
    wrong = client.get(sweep_point).content.decode()
    assert ">B<" in wrong and ">A<" not in wrong


def test_breakdown_rows_link_to_their_slice(compared: Project, owner: User, client: Client) -> None:
    Trajectory.objects.filter(external_id="C").update(model_name="other")
    client.force_login(owner)
    html = get(client, "compare", {"by": "model"}).content.decode()
    (other,) = links(html, "slice=model%3Dother")
    sliced = client.get(other).content.decode()
    assert "2 steps with both a label and a score, in 1 trajectories" in sliced


def test_first_error_page_lists_reference_and_prediction(
    compared: Project, owner: User, client: Client
) -> None:
    client.force_login(owner)
    html = get(client, "compare-first-errors", {"subset": "erroneous"}).content.decode()
    assert html.count("badge status-done") == 1  # A right
    assert html.count("badge status-failed") == 1  # B wrong
    b2 = Step.objects.get(trajectory__external_id="B", index=2)
    assert f"#step-{b2.pk}" in html  # B's predicted first error


def test_humans_partial_for_htmx(compared: Project, owner: User, client: Client) -> None:
    client.force_login(owner)
    response = get(client, "compare-humans", headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="humans">')
    assert "No step has labels from two annotators" in html


def test_disagreements_put_missed_errors_first_and_make_a_queue(
    compared: Project, owner: User, client: Client
) -> None:
    client.force_login(owner)
    html = get(client, "compare-disagreements").content.decode()
    rows = re.findall(r'id="disagreement-(\d+)"', html)
    by_pk = {str(s.pk): (s.trajectory.external_id, s.index) for s in Step.objects.all()}
    # B1 (bad, .7) is the missed error; then by gap: B2 (good, .4: .6), A3 (neutral, .2:
    # .3 is under .5, left out).
    assert [by_pk[r] for r in rows] == [("B", 1), ("B", 2)]
    assert html.count('class="missed"') == 1

    (action,) = re.findall(
        r'action="([^"]+)" class="inline-form" id="disagreement-queue-form"', html
    )
    response = client.post(unescape(action))
    queue = Queue.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("queue-detail", args=[queue.pk])
    items = list(QueueItem.objects.filter(queue=queue).order_by("position"))
    assert [item.trajectory.external_id for item in items] == ["B"]
    assert queue.selection["compare"]["scorer"] == "prm"
    # Only missed errors, lower gap: A has none, so still B only.
    missed = get(client, "compare-disagreements", {"kind": "missed", "min_gap": "0.1"})
    assert [by_pk[r] for r in re.findall(r'id="disagreement-(\d+)"', missed.content.decode())] == [
        ("B", 1)
    ]


def test_annotator_sees_disagreements_but_may_not_make_a_queue(
    compared: Project, annotator: User, client: Client
) -> None:
    client.force_login(annotator)
    html = get(client, "compare-disagreements").content.decode()
    assert "disagreement-queue-form" not in html
    response = client.post(reverse("compare-disagreement-queue", args=["demo"]) + "?scorer=prm")
    assert response.status_code == 403


def test_failure_overview_groups_first_errors(
    compared: Project, owner: User, client: Client
) -> None:
    # A third failed rollout whose humans found no error, and one nobody labelled.
    build(compared, [1, 1], [0.9, 0.9], external_id="D", success=False)
    build(compared, [None], [0.9], external_id="E", success=False)
    client.force_login(owner)
    html = client.get(reverse("failure-overview", args=["demo"])).content.decode()
    stats = dict(
        (label, int(value))
        for value, label in re.findall(
            r'stat-value">(\d+)</span><span class="stat-label">([^<]+)<', html
        )
    )
    assert stats["failed rollouts"] == 4
    assert stats["first error located"] == 2
    assert stats["labelled, no error marked"] == 1
    # A errs at step 2 (tagged), B at step 1 (untagged).
    assert ">step 1<" in html and ">step 2<" in html
    assert ">calculation error<" in html and ">(no tag)<" in html
    assert ">second quarter<" in html  # B: 1 of 3 steps; A: 2 of 4 is the third quarter
    assert ">third quarter<" in html
    (tagged,) = links(html, "value=calculation")
    listed = client.get(tagged).content.decode()
    a2 = Step.objects.get(trajectory__external_id="A", index=2)
    assert f"#step-{a2.pk}" in listed and ">B<" not in listed
    assert reverse("rollout-diff", args=[a2.trajectory_id]) in listed
    (untagged,) = [
        link
        for link in links(html, "grouping=tag")
        if parse_qs(urlparse(link).query).get("value") is None
    ]
    assert ">B<" in client.get(untagged).content.decode()


def test_failures_by_a_scorer(compared: Project, owner: User, client: Client) -> None:
    client.force_login(owner)
    html = client.get(
        reverse("failure-overview", args=["demo"]), {"labels": "model:prm", "threshold": "0.5"}
    ).content.decode()
    # By the scorer A errs at 2 (.3) and B at 2 (.4).
    assert re.search(r'>step 2</a></td>\s*<td class="num">2<', html)


def test_bad_parameters_are_explained(compared: Project, owner: User, client: Client) -> None:
    client.force_login(owner)
    html = get(client, "compare", {"labels": "people"}).content.decode()
    assert "unknown label source" in html
    response = get(client, "compare-steps", {"slice": "colour=red"})
    assert response.status_code == 400
    assert "unknown slice" in response.content.decode()
    bad_group = client.get(
        reverse("failure-list", args=["demo"]), {"grouping": "position", "value": "99"}
    )
    assert bad_group.status_code == 400


def test_project_home_links_the_compare_pages(
    compared: Project, owner: User, client: Client
) -> None:
    client.force_login(owner)
    html = client.get(reverse("project-home", args=["demo"])).content.decode()
    for name in ("compare", "compare-disagreements", "failure-overview"):
        assert reverse(name, args=["demo"]) in html


def test_compare_page_without_scorers_says_how_to_get_scores(
    project: Project, owner: User, client: Client
) -> None:
    client.force_login(owner)
    html = client.get(reverse("compare", args=["demo"])).content.decode()
    assert "No scorer has scored this project yet" in html


def test_long_trajectories_open_at_the_right_page(
    project: Project, owner: User, client: Client
) -> None:
    labels: list[int | None] = [1] * 250
    labels[230] = -1
    scores: list[float | None] = [0.9] * 250
    build(project, labels, scores, external_id="long")
    client.force_login(owner)
    html = get(client, "compare-steps", {"label": "-1"}).content.decode()
    step = Step.objects.get(trajectory__external_id="long", index=230)
    href = f"/t/{step.trajectory_id}/steps/?start=230#step-{step.pk}"
    assert href in unescape(html)
    assert f'id="step-{step.pk}"' in client.get(href.split("#")[0]).content.decode()
