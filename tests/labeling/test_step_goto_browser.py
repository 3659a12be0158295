""" "Go to step" on a trajectory longer than a page of steps, in a real browser: typing N
loads the page that holds step N in place of the steps shown and scrolls to it."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from labeling.models import StepLabel
from labeling.selectors import STEPS_PAGE_SIZE
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.screens import shot
from trajectories.models import Membership, Step
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"
STEPS = 2 * STEPS_PAGE_SIZE + 50


def indexes(page: Any) -> list[int]:
    return page.eval_on_selector_all("li.step", "rows => rows.map(r => Number(r.dataset.index))")


@pytest.mark.parametrize("viewport", [(1440, 900), (390, 844)])
def test_go_to_step_loads_its_page_and_scrolls_to_it(
    page: Any, live_server: Any, viewport: tuple[int, int]
) -> None:
    project = project_create(slug="long", name="Long")
    trajectory = trajectory_with_steps(project, [f"Step {i}: keep going." for i in range(STEPS)])
    user = UserFactory.create(username="reader")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "reader", PASSWORD)
    page.goto(live_server.url + reverse("trajectory-detail", args=[trajectory.pk]))
    assert indexes(page) == list(range(STEPS_PAGE_SIZE))
    shot(page, f"step-goto-{width}")

    target = Step.objects.get(trajectory=trajectory, index=2 * STEPS_PAGE_SIZE + 17)
    # Digits typed into the box are the step number, not label keys.
    page.fill("#step-goto-index", "")
    page.click("#step-goto-index")
    page.keyboard.type(str(target.index))
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#step-{target.pk}")
    # Where the scroll ends: in the top half, below the sticky labeling bar (the scroll
    # can pass through places above it on the way, as it did in a CI run on the phone).
    page.wait_for_function(
        """id => { const r = document.getElementById(id).getBoundingClientRect();
                   const bar = document.getElementById('labeling-bar').getBoundingClientRect();
                   return r.top >= bar.bottom - 1 && r.top < window.innerHeight / 2; }""",
        arg=f"step-{target.pk}",
    )
    assert indexes(page) == list(range(2 * STEPS_PAGE_SIZE, STEPS))
    # The sticky labeling bar does not cover the step scrolled to.
    bar = page.locator("#labeling-bar").bounding_box()
    row = page.locator(f"#step-{target.pk}").bounding_box()
    assert row["y"] >= bar["y"] + bar["height"] - 1
    assert not StepLabel.objects.exists()
    shot(page, f"step-goto-{width}-jumped")

    # Past the end: the last step.
    page.fill("#step-goto-index", str(STEPS + 999))
    page.evaluate("document.getElementById('step-goto-index').removeAttribute('max')")
    page.click("#step-goto button[type=submit]")
    last = Step.objects.get(trajectory=trajectory, index=STEPS - 1)
    page.wait_for_function(
        """id => { const e = document.getElementById(id); if (!e) return false;
                   const r = e.getBoundingClientRect();
                   return r.bottom > 0 && r.top < window.innerHeight; }""",
        arg=f"step-{last.pk}",
    )
    # Back to the first page, on a page of its own.
    page.fill("#step-goto-index", "3")
    page.click("#step-goto button[type=submit]")
    first = Step.objects.get(trajectory=trajectory, index=3)
    page.wait_for_selector(f"#step-{first.pk}")
    assert indexes(page) == list(range(STEPS_PAGE_SIZE))
