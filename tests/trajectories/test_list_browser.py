"""The trajectory list in a real browser: a header click sorts (and says so with
``aria-sort``), the label filters open and filter, long ids stay inside the page, and an
empty result says so; on a desktop and a phone."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.screens import UNLABELLED, shot
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"
# The innermost elements past the right edge, outside the table (which scrolls in its box).
WIDER_THAN_SCREEN = """width => Array.from(document.querySelectorAll('body *'))
  .filter(el => !el.closest('.table-scroll'))
  .filter(el => el.getBoundingClientRect().right > width + 1)
  .filter(el => !Array.from(el.children).some(c => c.getBoundingClientRect().right > width + 1))
  .map(el => `${el.tagName}.${el.className} ${Math.round(el.getBoundingClientRect().right)}`)"""


def rows(page: Any) -> list[str]:
    return page.locator("#trajectory-rows tr[id] td:first-child a:first-child").all_inner_texts()


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_the_list_sorts_by_a_header_and_filters_on_labels(
    page: Any, live_server: Any, width: int, height: int
) -> None:
    project = project_create(slug="rl", name="RL rollouts")
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    long_id = "rollout-" + "0123456789abcdef" * 6
    for number, steps in enumerate((3, 1, 4)):
        trajectory_with_steps(
            project, ["step"] * steps, external_id=f"{long_id}-{number}", task_key=f"t{number}"
        )
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "researcher", PASSWORD)
    page.goto(live_server.url + reverse("trajectory-list", args=[project.slug]))
    assert rows(page) == [f"{long_id}-2", f"{long_id}-1", f"{long_id}-0"]

    steps = page.locator("#trajectory-table th", has_text="Steps")
    assert steps.get_attribute("aria-sort") is None
    steps.locator("a").click()
    page.wait_for_url("**ordering=steps**")
    steps = page.locator("#trajectory-table th", has_text="Steps")
    assert steps.get_attribute("aria-sort") == "ascending"
    assert rows(page) == [f"{long_id}-1", f"{long_id}-0", f"{long_id}-2"]
    steps.locator("a").click()
    page.wait_for_url("**ordering=-steps**")
    assert page.locator("#trajectory-table th", has_text="Steps").get_attribute("aria-sort") == (
        "descending"
    )
    assert rows(page) == [f"{long_id}-2", f"{long_id}-0", f"{long_id}-1"]
    assert page.evaluate(UNLABELLED) == []
    assert page.evaluate(WIDER_THAN_SCREEN, width) == []
    shot(page, f"trajectory-list-sorted-{width}")

    page.locator("#label-filters summary").click()
    page.select_option("select[name=label_status]", "complete")
    page.click("#trajectory-filters button[type=submit]")
    page.wait_for_url("**label_status=complete**")
    assert rows(page) == []
    assert page.locator("#trajectory-rows .empty").inner_text() == (
        "No trajectories match these filters."
    )
    assert page.locator("#label-filters").get_attribute("open") is not None
    assert page.evaluate(WIDER_THAN_SCREEN, width) == []
    shot(page, f"trajectory-list-empty-{width}")
