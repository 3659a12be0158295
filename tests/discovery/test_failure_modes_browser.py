"""Failure modes in Chromium: a researcher opens the failures page of a project with
failures, follows "Failure modes", sees each mode's size and example steps, and turns a
mode into a labeling queue with one click."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.urls import reverse

from discovery.mode_services import failure_mode_run_start, failure_modes_execute
from labeling.models import Queue, QueueItem
from tests.browser import sign_in
from tests.discovery.test_failure_modes import THEMES, failed_run
from tests.factories import MembershipFactory, UserFactory
from tests.screens import shot
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-for-tests"


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_open_the_modes_and_make_a_queue_from_one(
    page: Any, live_server: Any, width: int, height: int
) -> None:
    project = project_create(slug="airline", name="Airline agent")
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    for theme, texts in THEMES.items():
        for i, text in enumerate(texts):
            failed_run(project, f"{theme}-{i}", text, model_name=f"gpt-{i % 2}")
    run = failure_mode_run_start(project=project, user=user)
    run = failure_modes_execute(run_id=run.pk)
    assert run.status == "done", run.error
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "researcher", PASSWORD)
    page.wait_for_url("**/")
    page.goto(live_server.url + reverse("failure-overview", args=[project.slug]))
    page.click("#failure-modes-link")
    page.wait_for_url("**/failures/modes/")
    cards = page.locator(".failure-mode")
    assert cards.count() == 3
    first = cards.first
    assert re.search(r"3\s*·\s*33%", first.locator(".mode-size").inner_text())
    assert first.locator(".mode-examples li a").count() == 3
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    shot(page, f"failure-modes-{width}")
    first.scroll_into_view_if_needed()
    shot(page, f"failure-modes-card-{width}")
    mode = run.modes.first()
    assert mode is not None
    page.locator(f"#mode-{mode.pk} button", has_text="Make a queue").click()
    page.wait_for_url("**/q/**")
    queue = Queue.objects.get(project=project)
    assert set(
        QueueItem.objects.filter(queue=queue).values_list("trajectory_id", flat=True)
    ) == set(mode.members.values_list("trajectory_id", flat=True))
    assert queue.name in page.content()
    shot(page, f"failure-modes-queue-{width}")
