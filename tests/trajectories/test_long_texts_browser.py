"""A trajectory whose task, ground truth and metadata are one long unbroken word, in a
real browser: the page shows the start of each, wrapped to the screen, and loads the rest
on demand; a 2,000,000-character task once kept the tab from ever being ready."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.screens import WIDEST, shot
from trajectories.models import Membership
from trajectories.selectors import STEP_PREVIEW_CHARS
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"
TASK_CHARS = 2_000_000


@pytest.mark.parametrize("viewport", [(1440, 900), (390, 844)])
def test_long_unbroken_texts_show_their_start_and_load_the_rest(
    page: Any, live_server: Any, viewport: tuple[int, int]
) -> None:
    project = project_create(slug="long", name="Long")
    trajectory = trajectory_with_steps(
        project,
        ["Step 0: read the task.", "Step 1: answer."],
        task="a" * TASK_CHARS,
        ground_truth="g" * 5_000,
        metadata={"blob": "m" * 5_000},
    )
    user = UserFactory.create(username="reader")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "reader", PASSWORD)

    # The page is ready (it was never, with the task laid out whole): the goto's timeout
    # bounds the wait so that a regression fails instead of hanging.
    page.goto(
        live_server.url + reverse("trajectory-detail", args=[trajectory.pk]),
        wait_until="domcontentloaded",
        timeout=20_000,
    )
    ready_ms = page.evaluate(
        "performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd"
    )
    print(f"DOMContentLoaded after {ready_ms:.0f} ms with a {TASK_CHARS}-character task")
    task = page.locator("#trajectory-text-task")
    assert len(task.locator(".prose").inner_text().strip()) == STEP_PREVIEW_CHARS
    assert f"first {STEP_PREVIEW_CHARS} of {TASK_CHARS} characters" in task.inner_text()
    assert len(page.inner_text("#trajectory-text-ground_truth .prose").strip()) == (
        STEP_PREVIEW_CHARS
    )
    # Wrapped to the screen: nothing reaches past its right edge.
    assert page.evaluate(WIDEST, width) == []
    shot(page, f"long-texts-{width}")

    # "Show all" loads the whole ground truth in place, still wrapped.
    page.click("#trajectory-text-ground_truth .show-all a")
    page.wait_for_selector("#trajectory-text-ground_truth:not(.is-truncated)")
    assert len(page.inner_text("#trajectory-text-ground_truth .prose").strip()) == 5_000
    page.click("details.metadata summary")
    page.click("#trajectory-text-metadata .show-all a")
    page.wait_for_selector("#trajectory-text-metadata:not(.is-truncated)")
    assert "m" * 5_000 in page.inner_text("#trajectory-text-metadata")
    assert page.evaluate(WIDEST, width) == []
    shot(page, f"long-texts-{width}-all")


def test_full_text_page_without_javascript(client: Any) -> None:
    project = project_create(slug="plain", name="Plain")
    trajectory = trajectory_with_steps(project, ["x"], task="t" * 3_000)
    user = UserFactory.create(username="plain")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.ANNOTATOR)
    client.force_login(user)
    page = client.get(reverse("trajectory-text", args=[trajectory.pk, "task"]))
    assert page.status_code == 200 and "t" * 3_000 in page.content.decode()
    unknown = client.get(reverse("trajectory-text", args=[trajectory.pk, "password"]))
    assert unknown.status_code == 404
