"""The compare page in a real browser: headless Chromium against a live server. A
researcher opens the comparison, clicks a confusion-matrix cell and lands on the steps
behind it, opens one in its trajectory, and follows a point of a plot the same way."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from tests.browser import sign_in
from tests.evaluation.test_compare import build
from tests.factories import MembershipFactory, UserFactory
from trajectories.models import Membership, Step
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


def test_click_a_confusion_cell_and_land_on_its_steps(page: Any, live_server: Any) -> None:
    project = project_create(slug="cmp", name="Compare")
    researcher = UserFactory.create(username="res")
    MembershipFactory.create(user=researcher, project=project, role=Membership.Role.RESEARCHER)
    build(project, [1, 1, -1, 0], [0.9, 0.6, 0.3, 0.2], external_id="A", success=False)
    build(project, [1, -1, 1], [0.8, 0.7, 0.4], external_id="B", success=False)
    build(project, [1, 1], [0.9, 0.55], external_id="C", success=True)
    missed = Step.objects.get(trajectory__external_id="B", index=1)

    sign_in(page, live_server, "res", PASSWORD)

    # From the project home to the comparison.
    page.goto(live_server.url + reverse("project-home", args=["cmp"]))
    page.click("#compare-links a:text('Model against humans')")
    page.wait_for_selector("#confusion")
    assert page.inner_text("#metric-auroc") == "0.750"
    # Between humans loads into the page by itself.
    page.wait_for_selector("#humans")

    # The cell "humans say bad, the model says good" holds one step: B's step 1.
    page.click("a[data-cell='bad-good']")
    page.wait_for_url("**/compare/steps/**")
    assert "labelled bad" in page.inner_text("#steps-title")
    rows = page.locator("#compare-steps tbody tr")
    assert rows.count() == 1
    assert rows.first.get_attribute("data-step") == str(missed.pk)

    # The step opens in its trajectory, at that step.
    rows.first.locator("a.step-link").click()
    page.wait_for_url(f"**/t/{missed.trajectory_id}/#step-{missed.pk}")
    page.wait_for_selector(f"#step-{missed.pk}")

    # A point of the calibration plot leads to its steps too.
    page.go_back()
    page.go_back()
    page.wait_for_selector("#chart-calibration")
    page.locator("#chart-calibration a.chart-point-link").first.click()
    page.wait_for_url("**/compare/steps/**decided=1**")
    assert page.locator("#compare-steps tbody tr").count() >= 1
