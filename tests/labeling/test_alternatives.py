"""A trajectory's page marks the steps other trajectories branch from (PRM800K's
alternative completions, rollouts from a step) and links to each alternative at the step
it takes its own; without extra queries."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.conftest import REALDATA
from tests.factories import trajectory_with_steps
from trajectories.models import Project, Step, Trajectory
from trajectories.services import trajectory_import

pytestmark = pytest.mark.django_db

PHASE2 = REALDATA / "prm800k_sample" / "phase2_train_sample.jsonl"


def page(client: Client, trajectory: Trajectory) -> str:
    response = client.get(reverse("trajectory-detail", args=[trajectory.pk]))
    assert response.status_code == 200
    return response.content.decode()


def marked(html: str) -> dict[int, list[int]]:
    """Step id -> the alternatives' ids its mark links to."""
    found = {}
    for step_pk, body in re.findall(
        r'<p class="step-alternatives" id="alternatives-(\d+)">(.*?)</p>', html, flags=re.S
    ):
        found[int(step_pk)] = [int(pk) for pk in re.findall(r'href="/t/(\d+)/steps/', body)]
    return found


def test_the_real_prm800k_paths_mark_where_their_alternatives_branch(
    client: Client, project: Project, owner: User
) -> None:
    trajectory_import(project=project, source_format="prm800k", path=PHASE2)
    children = Trajectory.objects.filter(project=project, parent__isnull=False)
    parent = Counter(children.values_list("parent_id", flat=True)).most_common(1)[0][0]
    main = Trajectory.objects.get(pk=parent)
    client.force_login(owner)
    html = page(client, main)
    expected: dict[int, list[int]] = {}
    last = main.step_count - 1
    for child in children.filter(parent=main).order_by("pk"):
        assert child.branch_index is not None
        index = min(child.branch_index, last)
        step = Step.objects.get(trajectory=main, index=index)
        expected.setdefault(step.pk, []).append(child.pk)
    assert expected
    assert marked(html) == expected
    # Each link lands on the alternative's own step at the branch point.
    first = children.filter(parent=main).order_by("pk").first()
    assert first is not None
    link = reverse("trajectory-steps", args=[first.pk]) + f"?step={first.branch_index}"
    assert f'href="{link}"' in html
    # The alternatives themselves have none.
    assert marked(page(client, first)) == {}


def test_the_marks_cost_no_query_and_cap_the_links(
    client: Client, project: Project, owner: User
) -> None:
    parent = trajectory_with_steps(project, ["a", "b", "c"], external_id="main", task_key="t")
    lone = trajectory_with_steps(project, ["a", "b", "c"], external_id="lone", task_key="u")
    for n in range(10):
        child = trajectory_with_steps(
            project, ["a", f"b{n}"], external_id=f"alt-{n}", task_key="t", success=n % 2 == 0
        )
        Trajectory.objects.filter(pk=child.pk).update(parent=parent, branch_index=1)
    client.force_login(owner)
    counts = []
    for trajectory in (lone, parent):
        with CaptureQueriesContext(connection) as queries:
            html = page(client, trajectory)
        counts.append(len(queries))
    assert counts[0] == counts[1]
    second = Step.objects.get(trajectory=parent, index=1)
    links = marked(html)
    assert list(links) == [second.pk]
    assert len(links[second.pk]) == 8
    mark = html.split(f'id="alternatives-{second.pk}">')[1].split("</p>")[0]
    assert "10 alternatives" in mark and "10 in all" in mark
    assert 'class="badge outcome-success">success</span>' in mark
