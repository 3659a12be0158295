"""A 64-character external id in a real browser: the trajectory list keeps its columns on
the card at a laptop's size (the id wraps), and the trajectory page is no wider than a
390 px phone (the heading and the breadcrumbs wrap)."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.screens import WIDEST, shot
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"
LONG_ID = "run-" + "0123456789abcdef" * 3 + "fedcba987654"  # 64 characters


@pytest.mark.parametrize("viewport", [(1440, 900), (390, 844)])
def test_a_long_external_id_wraps_in_the_list_and_on_its_page(
    page: Any, live_server: Any, viewport: tuple[int, int]
) -> None:
    assert len(LONG_ID) == 64
    project = project_create(slug="ids", name="Ids")
    trajectory = trajectory_with_steps(
        project, ["Step 0.", "Step 1."], external_id=LONG_ID, task_key=LONG_ID
    )
    trajectory_with_steps(project, ["Other."], external_id="short")
    user = UserFactory.create(username="reader")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "reader", PASSWORD)

    page.goto(live_server.url + reverse("trajectory-list", args=[project.slug]))
    page.wait_for_selector(f"#trajectory-{trajectory.pk}")
    if width >= 1440:
        # Every column stays on the card: the table needs no sideways scroll.
        table = page.evaluate(
            "() => { const t = document.querySelector('#trajectory-table');"
            " const box = t.closest('.table-scroll') || t.parentElement;"
            " return [t.getBoundingClientRect().right, box.getBoundingClientRect().right]; }"
        )
        assert table[0] <= table[1] + 1, table
    cell = page.locator(f"#trajectory-{trajectory.pk} td").first
    assert cell.bounding_box()["width"] < 400
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    shot(page, f"long-id-list-{width}")

    page.goto(live_server.url + reverse("trajectory-detail", args=[trajectory.pk]))
    page.wait_for_selector("h1")
    assert LONG_ID in page.inner_text("h1")
    assert page.evaluate("document.documentElement.scrollWidth") <= width, page.evaluate(
        WIDEST, width
    )
    shot(page, f"long-id-page-{width}")
