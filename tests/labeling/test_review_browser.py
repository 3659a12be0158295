"""The review table in Chromium at a laptop's and a phone's size: each label's tags,
rationale (its TeX typeset) and correction are on the page, the count says how many steps
people disagree on, and the filter narrows the rows. On a phone the table scrolls
sideways in neither: each step is a card, each label under its annotator's name, and the
keys still set the final label."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from tests.browser import sign_in
from tests.labeling.conftest import step_at
from tests.labeling.test_review import reviewed  # noqa: F401  (the fixture)
from tests.screens import UNLABELLED, WIDEST, shot
from trajectories.models import Trajectory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# How a row is laid out: the header's and the row's display, what each cell's label (its
# ::before) says, and whether the cells stand one above the other.
CARD_LAYOUT = """row => {
  const tr = document.querySelector(row);
  const cells = Array.from(tr.children);
  const tops = cells.map(c => c.getBoundingClientRect().top);
  return {
    head: getComputedStyle(document.querySelector('#review-table thead')).display,
    row: getComputedStyle(tr).display,
    names: cells.map(c => getComputedStyle(c, '::before').content.replace(/^"|"$/g, '')),
    cellsStacked: tops.every((top, n) => n === 0 || top > tops[n - 1]),
  };
}"""


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
    sign_in(page, live_server, "researcher", "pw-for-tests")
    page.goto(live_server.url + reverse("review-trajectory", args=[reviewed.pk]))
    row = f"#review-{step_at(reviewed, 1).pk}"
    page.wait_for_selector(f"{row} .review-rationale .katex")
    assert "calculation error" in page.inner_text(f"{row} .tags")
    page.click(f"{row} .review-correction summary")
    assert "Then 3x + 2 = 11, so" in page.inner_text(f"{row} .review-correction")
    assert "1 of 5 labelled steps where annotators disagree" in page.inner_text("#review-counts")
    shot(page, f"review-{width}")
    page.evaluate("window.scrollTo(0, 0)")
    shot(page, f"review-{width}-top")
    assert page.locator("h1").count() == 1
    assert page.evaluate(UNLABELLED) == []
    # The page is no wider than the screen, and neither is the table: on a phone it does
    # not scroll sideways in its box as other tables do, each step is a card.
    wide = page.evaluate("document.documentElement.scrollWidth")
    assert wide <= width, page.evaluate(WIDEST, width)
    table = page.evaluate(
        "() => { const t = document.querySelector('#review-table');"
        " return [t.scrollWidth, t.clientWidth]; }"
    )
    assert table[0] <= table[1], table
    layout = page.evaluate(CARD_LAYOUT, row)
    if width < 640:
        assert layout["head"] == "none" and layout["row"] == "block", layout
        # Each cell says whose label it is: the annotator's name above it.
        assert layout["names"] == [
            "Step",
            "Content",
            "annotator",
            "annotator2",
            "import:prm800k",
            "Final",
        ], layout
        assert layout["cellsStacked"], layout
        # The keys still work on a card: the next step, then the schema's key for "bad".
        page.click(f"{row} .review-content")
        page.keyboard.press("j")
        next_row = f"#review-{step_at(reviewed, 2).pk}"
        page.wait_for_selector(f"{next_row}.is-current")
        page.keyboard.press("1")
        page.wait_for_selector(f'{next_row} button[data-key="1"][aria-pressed="true"]')
        shot(page, f"review-{width}-final")
    else:
        assert layout["head"] != "none" and layout["row"] == "table-row", layout
        assert not layout["cellsStacked"], layout

    page.select_option("#review-show", "disagreements")
    page.click("#review-filter button")
    page.wait_for_url("**show=disagreements**")
    assert page.locator("#review-table tbody tr").count() == 1
    assert page.locator(row).count() == 1
