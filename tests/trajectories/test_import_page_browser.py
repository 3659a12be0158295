"""The import page in a real browser: its format list offers every registered format
(the new importers included), and the page reads well on a desktop and a phone."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory
from tests.screens import UNLABELLED, WIDEST, shot
from trajectories.formats import format_choices
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_import_page_lists_every_format_and_fits(
    page: Any, live_server: Any, width: int, height: int
) -> None:
    project = project_create(slug="rl", name="RL rollouts")
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "researcher", PASSWORD)
    page.goto(live_server.url + reverse("import-new", args=[project.slug]))

    select = page.locator("select[name=source_format]")
    offered = select.locator("option").evaluate_all(
        "options => options.map(option => [option.value, option.textContent.trim()])"
    )
    assert [tuple(pair) for pair in offered] == format_choices()
    select.select_option("nemo-gym")
    assert select.input_value() == "nemo-gym"
    assert page.locator("h1").count() == 1
    assert page.evaluate(UNLABELLED) == []
    assert page.evaluate(WIDEST, page.viewport_size["width"]) == []
    shot(page, f"import-new-{width}")
