"""Span labels by keyboard in a real browser: shift+j selects a run of steps, a span
value's key labels it (and only the span: the same key is a step label's too), the
brackets show beside the steps, a long span and the empty panel fit a laptop's and a
phone's screen."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from labeling.models import SpanLabel, StepLabel
from labeling.services import span_schema_save
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.screens import UNLABELLED, WIDEST, shot
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


@pytest.mark.parametrize("viewport", [(1440, 900), (390, 844)])
def test_a_span_is_labelled_by_keyboard(
    page: Any, live_server: Any, viewport: tuple[int, int]
) -> None:
    project = project_create(slug="spans", name="Spans")
    span_schema_save(project=project, name="triage")
    short = trajectory_with_steps(project, [f"Step {n}: try x = {n}." for n in range(6)])
    long = trajectory_with_steps(
        project, [f"Step {n}: run the tests again and read the same error." for n in range(40)]
    )
    user = UserFactory.create(username="lead")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "lead", PASSWORD)

    # The empty panel: the legend with the keys, no spans yet.
    page.goto(live_server.url + reverse("trajectory-detail", args=[short.pk]))
    page.wait_for_selector("#span-form")
    assert page.locator("#span-empty").inner_text() == "No spans yet."
    page.locator("#spans").scroll_into_view_if_needed()
    shot(page, f"spans-empty-{width}")
    assert page.evaluate(UNLABELLED) == []

    # Step 0 is current: shift+j three times selects steps 0 to 3.
    page.locator("body").click(position={"x": 1, "y": 1})
    for _ in range(3):
        page.keyboard.press("Shift+J")
    selected = page.eval_on_selector_all(
        "li.step.in-span-selection", "rows => rows.map(r => Number(r.dataset.index))"
    )
    assert selected == [0, 1, 2, 3]
    # Key 1 is "bad" for the step schema and "decisive progress" for the span schema:
    # with a run selected it labels the span, not the step.
    page.keyboard.press("1")
    page.wait_for_selector("#span-status")
    assert page.locator("#span-status").inner_text() == "Saved: steps 0\u20133 · decisive progress"
    span = SpanLabel.objects.get(trajectory=short)
    assert (span.start_index, span.end_index, span.value) == (0, 3, "decisive progress")
    assert not StepLabel.objects.filter(step__trajectory=short).exists()
    # The brackets are drawn once the swapped panel settles.
    page.wait_for_function("() => document.querySelectorAll('.span-bracket').length === 4")
    brackets = page.eval_on_selector_all(
        "li.step:has(.span-bracket)", "rows => rows.map(r => Number(r.dataset.index))"
    )
    assert brackets == [0, 1, 2, 3]
    assert page.locator("li.step.in-span-selection").count() == 0
    # shift+k from step 3 back to 2, then Esc: nothing selected, nothing labelled.
    page.keyboard.press("Shift+K")
    assert page.locator("li.step.in-span-selection").count() == 2
    page.keyboard.press("Escape")
    assert page.locator("li.step.in-span-selection").count() == 0
    page.locator('li.step[data-index="1"]').scroll_into_view_if_needed()
    shot(page, f"spans-short-{width}")
    assert page.evaluate(WIDEST, width) == []

    # A long span (30 steps) with a shorter one inside it, drawn in a second lane.
    page.goto(live_server.url + reverse("trajectory-detail", args=[long.pk]))
    page.wait_for_selector("#span-form")
    page.locator("body").click(position={"x": 1, "y": 1})
    for _ in range(29):
        page.keyboard.press("Shift+J")
    page.keyboard.press("2")
    page.wait_for_selector("#span-status")
    page.keyboard.press("k")
    page.keyboard.press("k")
    page.keyboard.press("Shift+K")
    page.keyboard.press("4")
    page.wait_for_function(
        "() => document.querySelectorAll('#span-list .span-item').length === 2"
        " && document.querySelectorAll('li.step[data-index=\"27\"] .span-bracket').length === 2"
    )
    assert sorted(
        SpanLabel.objects.filter(trajectory=long).values_list("start_index", "end_index", "value")
    ) == [(0, 29, "useful exploration"), (26, 27, "regression")]
    lanes = page.eval_on_selector_all(
        'li.step[data-index="27"] .span-bracket',
        "marks => marks.map(m => m.style.getPropertyValue('--lane'))",
    )
    assert sorted(lanes) == ["0", "1"]
    page.locator('li.step[data-index="26"]').scroll_into_view_if_needed()
    shot(page, f"spans-long-{width}")
    assert page.evaluate(WIDEST, width) == []
    page.locator("#span-list").scroll_into_view_if_needed()
    shot(page, f"spans-panel-{width}")


def test_a_span_key_on_a_panel_htmx_has_not_wired_yet_stays_on_the_page(
    page: Any, live_server: Any
) -> None:
    """htmx wires up swapped-in content when the swap settles, some 20 ms later; a span
    key pressed before that used to post the form as a plain page and leave the
    trajectory. The panel is put back as fresh, unprocessed HTML, as a swap leaves it."""
    project = project_create(slug="spans", name="Spans")
    span_schema_save(project=project, name="triage")
    trajectory = trajectory_with_steps(project, [f"Step {n}." for n in range(4)])
    user = UserFactory.create(username="lead")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    sign_in(page, live_server, "lead", PASSWORD)
    url = live_server.url + reverse("trajectory-detail", args=[trajectory.pk])
    page.goto(url)
    page.wait_for_selector("#span-form")
    page.wait_for_function("() => !document.querySelector('.htmx-request, .htmx-settling')")
    page.evaluate(
        "() => { const panel = document.getElementById('spans');"
        " panel.outerHTML = panel.outerHTML; }"
    )
    page.locator("body").click(position={"x": 1, "y": 1})
    page.keyboard.press("Shift+J")
    page.keyboard.press("1")
    page.wait_for_selector("#span-status")
    assert page.url == url
    assert page.locator("#span-status").inner_text() == "Saved: steps 0\u20131 · decisive progress"
    assert SpanLabel.objects.filter(trajectory=trajectory).count() == 1
