"""The rubric compare page in Chromium: reached from the compare page, the majority
against a judge per criterion, at 1440 and 390 px (nothing past the phone's edge, every
control labelled)."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory
from tests.labeling.test_rubric_sources import rubric_world
from tests.screens import UNLABELLED, WIDEST, shot
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_rubric_compare_page(page: Any, live_server: Any) -> None:
    project = project_create(slug="rb", name="Rubric runs")
    rubric_world(project)
    user = UserFactory.create(username="reader")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.ANNOTATOR)
    sign_in(page, live_server, "reader", "pw-for-tests")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(live_server.url + reverse("compare", args=[project.slug]))
    page.click("#compare-rubrics-link")
    page.wait_for_selector("#rubric-alignment")
    row = page.locator("#rubric-criterion-0")
    assert row.locator("td[data-label=Agreement]").inner_text() == "50%"
    assert row.locator("td[data-label=Kappa]").inner_text() == "0.33"
    page.select_option("#id_a", "rubric:human:ann1")
    page.click("#rubric-compare-form button[type=submit]")
    page.wait_for_selector(".compare-summary:has-text('rubric:human:ann1')")
    assert page.evaluate(UNLABELLED) == []
    page.goto(live_server.url + reverse("compare-rubrics", args=[project.slug]))
    shot(page, "rubric-compare-1440")
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    shot(page, "rubric-compare-390")
    assert page.evaluate(WIDEST, 390) == []
    page.locator("#rubric-criterion-1").scroll_into_view_if_needed()
    shot(page, "rubric-compare-criteria-390")
