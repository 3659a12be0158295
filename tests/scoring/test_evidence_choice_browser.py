"""The scorer picker in Chromium: on a trajectory scored by two models, pick the other
one; the PRM strip, the steps' columns and the address follow, and a later visit without
anything in the address shows the same pick. At a laptop's and a phone's size."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from scoring import prm
from scoring.models import Scorer, ScoringRun, StepScore
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.screens import UNLABELLED, WIDEST, shot
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


def external(project: Any, name: str, steps: list[Any], values: list[float]) -> Scorer:
    scorer = Scorer.objects.create(project=project, name=name, kind=prm.EXTERNAL)
    for step, value in zip(steps, values, strict=True):
        StepScore.objects.create(step=step, scorer=scorer, value=value)
    ScoringRun.objects.create(project=project, scorer=scorer, kind="import", status="done")
    return scorer


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_picking_a_scorer_changes_the_scores_and_is_remembered(
    page: Any, live_server: Any, width: int, height: int
) -> None:
    project = project_create(slug="demo", name="Demo")
    owner = UserFactory.create(username="owner", password=PASSWORD)
    MembershipFactory.create(user=owner, project=project, role=Membership.Role.ADMIN)
    trajectory = trajectory_with_steps(
        project,
        ["16 - 3 = 13 eggs remain.", "13 - 4 = 8 to sell.", "8 * 2 = 16 dollars."],
        task_key="eggs",
        success=False,
    )
    steps = list(trajectory.steps.order_by("index"))
    careful = external(project, "careful-prm", steps, [0.9, 0.2, 0.1])
    external(project, "lenient-prm", steps, [0.95, 0.9, 0.85])  # the newest: the default

    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "owner", PASSWORD)
    url = live_server.url + reverse("trajectory-detail", args=[trajectory.pk])
    page.goto(url)
    column = f"#step-evidence-{steps[1].pk} .step-score"
    page.wait_for_selector(column)
    assert "0.90" in page.inner_text(column)
    assert "lenient-prm" in page.inner_text("#evidence .strip-label")
    assert page.locator(".first-errors", has_text="PRM").count() == 0

    page.select_option("#evidence-scorer", str(careful.pk))
    page.click("#evidence-picker button")
    page.wait_for_url(f"**scorer={careful.pk}**")
    page.wait_for_selector(column)
    assert "0.20" in page.inner_text(column)
    assert "careful-prm" in page.inner_text("#evidence .strip-label")
    assert "PRM · step 1" in page.inner_text(".first-errors")
    shot(page, f"scorer-picker-{width}")
    assert page.locator("h1").count() == 1
    assert page.evaluate(UNLABELLED) == []
    assert page.evaluate(WIDEST, width) == []

    # Remembered: the plain address shows the pick.
    page.goto(url)
    page.wait_for_selector(column)
    assert "0.20" in page.inner_text(column)


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_the_default_scorer_is_one_with_scores_on_this_trajectory(
    page: Any, live_server: Any, width: int, height: int
) -> None:
    project = project_create(slug="demo", name="Demo")
    owner = UserFactory.create(username="owner", password=PASSWORD)
    MembershipFactory.create(user=owner, project=project, role=Membership.Role.ADMIN)
    here = trajectory_with_steps(project, ["2 + 2 = 5.", "So 5."], task_key="sum", success=False)
    elsewhere = trajectory_with_steps(project, ["1 + 1 = 2."], task_key="one", success=True)
    steps = list(here.steps.order_by("index"))
    external(project, "here-prm", steps, [0.2, 0.1])
    # The project's last finished scorer has no scores on the trajectory shown.
    external(project, "elsewhere-prm", list(elsewhere.steps.all()), [0.9])

    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "owner", PASSWORD)
    page.goto(live_server.url + reverse("trajectory-detail", args=[here.pk]))
    column = f"#step-evidence-{steps[0].pk} .step-score"
    page.wait_for_selector(column)
    assert "0.20" in page.inner_text(column)
    assert "here-prm" in page.inner_text("#evidence .strip-label")
    picker = page.inner_text("#evidence-scorer")
    assert "no scores here" not in picker
    assert page.eval_on_selector("#evidence-scorer", "s => s.selectedOptions[0].textContent") == (
        "here-prm · 2 steps"
    )
    assert page.evaluate(WIDEST, width) == []
    shot(page, f"scorer-default-{width}")
