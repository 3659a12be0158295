"""The review table in Chromium at a laptop's and a phone's size: each label's tags,
rationale (its TeX typeset) and correction are on the page, the count says how many steps
people disagree on, and the filter narrows the rows. On a phone the table scrolls
sideways in its own box, the page does not."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from tests.labeling.conftest import step_at
from tests.labeling.test_review import reviewed  # noqa: F401  (the fixture)
from tests.screens import UNLABELLED, WIDEST, shot
from trajectories.models import Trajectory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_the_review_table_reads_well_and_filters(
    page: Any,
    live_server: Any,
    researcher: User,
    reviewed: Trajectory,  # noqa: F811
    width: int,
    height: int,
) -> None:
    page.set_viewport_size({"width": width, "height": height})
    page.goto(live_server.url + reverse("login"))
    page.fill("input[name=username]", "researcher")
    page.fill("input[name=password]", "pw-for-tests")
    page.click("button[type=submit]")
    page.goto(live_server.url + reverse("review-trajectory", args=[reviewed.pk]))
    row = f"#review-{step_at(reviewed, 1).pk}"
    page.wait_for_selector(f"{row} .review-rationale .katex")
    assert "calculation error" in page.inner_text(f"{row} .tags")
    page.click(f"{row} .review-correction summary")
    assert "Then 3x + 2 = 11, so" in page.inner_text(f"{row} .review-correction")
    assert "1 of 5 labelled steps where annotators disagree" in page.inner_text("#review-counts")
    shot(page, f"review-{width}")
    assert page.locator("h1").count() == 1
    assert page.evaluate(UNLABELLED) == []
    # The table scrolls inside its own box on a phone (as every .table does); the page
    # itself is no wider than the screen.
    wide = page.evaluate("document.documentElement.scrollWidth")
    assert wide <= width, page.evaluate(WIDEST, width)

    page.select_option("#review-show", "disagreements")
    page.click("#review-filter button")
    page.wait_for_url("**show=disagreements**")
    assert page.locator("#review-table tbody tr").count() == 1
    assert page.locator(row).count() == 1
