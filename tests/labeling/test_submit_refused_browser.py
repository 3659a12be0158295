"""A refused submit, in a real browser: the reason shows beside the Submit button the
annotator just pressed (on screen, announced as an alert), not only in the flash area a
screen above it."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from labeling.models import TrajectoryLabel
from labeling.services import queue_create
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.screens import shot
from trajectories.models import Membership
from trajectories.selection import TrajectoryFilters
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


@pytest.mark.parametrize("viewport", [(1440, 900), (390, 844)])
def test_refused_submit_says_why_beside_the_button(
    page: Any, live_server: Any, viewport: tuple[int, int]
) -> None:
    project = project_create(slug="sub", name="Submit")
    annotator = UserFactory.create(username="ann")
    MembershipFactory.create(user=annotator, project=project, role=Membership.Role.ANNOTATOR)
    owner = UserFactory.create(username="boss")
    trajectory_with_steps(project, [f"Step {i}: think." for i in range(12)])
    queue = queue_create(
        project=project, name="Round 1", created_by=owner, filters=TrajectoryFilters()
    )
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "ann", PASSWORD)
    page.goto(live_server.url + reverse("queue-detail", args=[queue.pk]))
    page.click("#queue-start button")
    page.wait_for_selector("[data-labeling]")

    # Nothing labelled yet: submitting is refused.
    page.click("#finish-submit")
    error = page.locator("#finish-error")
    error.wait_for(state="visible")
    assert "12 steps still need a label" in error.inner_text()
    assert error.get_attribute("role") == "alert"
    # It is on screen, beside the button, while the flash area is scrolled away (scrolled
    # to the bottom edge, its box may end a fraction of a pixel past it).
    box = error.bounding_box()
    button = page.locator("#finish-submit").bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= height + 1
    assert abs(box["y"] - button["y"]) < 120
    assert not page.locator("#flash").is_visible() or not page.inner_text("#flash").strip()
    assert not TrajectoryLabel.objects.exists()
    shot(page, f"submit-refused-{width}")

    # Giving up is accepted: the panel comes back without the message.
    page.select_option("#finish-reason", "give_up")
    page.click("#finish-submit")
    page.wait_for_selector("#finish-status")
    assert not page.locator("#finish-error").inner_text().strip()
    assert TrajectoryLabel.objects.get().finish_reason == "give_up"
