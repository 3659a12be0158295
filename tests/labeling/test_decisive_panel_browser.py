"""The decisive-failure panel in a real browser: a single-agent math rollout (no step
names an agent) has nobody else to blame and shows no panel; a multi-agent chat shows it.
At a laptop's and a phone's size."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.screens import shot
from trajectories.models import Membership, Step
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


@pytest.mark.parametrize("viewport", [(1440, 900), (390, 844)])
def test_the_panel_shows_only_where_agents_act(
    page: Any, live_server: Any, viewport: tuple[int, int]
) -> None:
    project = project_create(slug="mix", name="Mix")
    math = trajectory_with_steps(project, ["2 + 2 = 5.", "So 5."], success=False)
    chat = trajectory_with_steps(project, ["Plan.", "Search.", "Answer."], success=False)
    for step, agent in zip(
        chat.steps.order_by("index"), ["planner", "searcher", "planner"], strict=True
    ):
        Step.objects.filter(pk=step.pk).update(agent=agent)
    user = UserFactory.create(username="lead")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "lead", PASSWORD)

    page.goto(live_server.url + reverse("trajectory-detail", args=[math.pk]))
    page.wait_for_selector("#decisive[hidden]", state="attached")
    assert page.locator("#decisive-title").count() == 0
    page.locator("#finish").scroll_into_view_if_needed()
    shot(page, f"decisive-none-{width}")

    page.goto(live_server.url + reverse("trajectory-detail", args=[chat.pk]))
    page.wait_for_selector("#decisive-form")
    options = page.eval_on_selector_all("#decisive-agent option", "o => o.map(x => x.value)")
    assert options == ["", "planner", "searcher"]
