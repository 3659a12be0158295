"""Span review in a real browser: the annotators' spans side by side, a pick that makes a
final span without reloading the page, and a page that fits a laptop's and a phone's
screen (nothing past the right edge, every control named)."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from labeling.models import FinalSpan, SpanLabel
from labeling.selectors import labeling_state_for_user
from labeling.services import span_label_set, span_schema_save
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.screens import UNLABELLED, WIDEST, shot
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


@pytest.mark.parametrize("viewport", [(1440, 900), (390, 844)])
def test_a_reviewer_picks_a_final_span(
    page: Any, live_server: Any, viewport: tuple[int, int]
) -> None:
    project = project_create(slug="spans", name="Spans")
    span_schema_save(project=project, name="triage")
    trajectory = trajectory_with_steps(
        project, [f"Step {n}: run the tests again and read the same error." for n in range(8)]
    )
    people = {}
    for name, role in (
        ("lead", Membership.Role.RESEARCHER),
        ("alice-the-annotator-with-a-long-name", Membership.Role.RESEARCHER),
        ("bob", Membership.Role.RESEARCHER),
    ):
        people[name] = UserFactory.create(username=name)
        MembershipFactory.create(user=people[name], project=project, role=role)
    for name, start, end, value in (
        ("alice-the-annotator-with-a-long-name", 0, 3, "useful exploration"),
        ("alice-the-annotator-with-a-long-name", 4, 7, "regression"),
        ("bob", 1, 3, "useful exploration"),
        ("bob", 5, 7, "no-progress infrastructure"),
    ):
        state = labeling_state_for_user(people[name], trajectory.pk)
        span_label_set(state=state, schema="triage", start=start, end=end, value=value)
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "lead", PASSWORD)
    page.goto(live_server.url + reverse("review-spans", args=[trajectory.pk]))
    columns = page.eval_on_selector_all(
        ".span-review-column[data-annotator]", "cols => cols.map(c => c.dataset.annotator)"
    )
    assert columns == ["alice-the-annotator-with-a-long-name", "bob"]
    # Steps 0 and 4-7 are covered differently: marked.
    assert page.locator("tr.review-row.has-disagreement").count() == 5
    if width > 1000:
        # Side by side: the annotators' columns and the final one share a row.
        tops = page.eval_on_selector_all(
            ".span-review-column",
            "cols => cols.map(c => Math.round(c.getBoundingClientRect().top))",
        )
        assert len(set(tops)) == 1, tops
    # No value is squeezed into a sliver (a long name beside it on a phone).
    narrowest = page.eval_on_selector_all(
        ".span-review-grid .span-value",
        "vs => Math.min(...vs.map(v => v.getBoundingClientRect().width))",
    )
    assert narrowest > 60
    shot(page, f"span-review-{width}")
    assert page.evaluate(WIDEST, width) == []
    assert page.evaluate(UNLABELLED) == []

    # Bob's first span becomes final, without a reload.
    bob = page.locator('.span-review-column[data-annotator="bob"]')
    bob.get_by_role("button", name="Pick").first.click()
    page.wait_for_selector("#span-review-status")
    assert (
        "Final: steps 1-3 · useful exploration" in page.locator("#span-review-status").inner_text()
    )
    final = FinalSpan.objects.get(trajectory=trajectory)
    assert (final.start_index, final.end_index, final.adjudicator.username) == (1, 3, "lead")
    assert page.locator(".span-review-final .span-item").count() == 1
    # A range of the reviewer's own.
    page.fill("input[name=start]", "4")
    page.fill("input[name=end]", "7")
    page.select_option("select[name=value]", "regression")
    page.get_by_role("button", name="Set final span").click()
    page.wait_for_function(
        "() => document.querySelectorAll('.span-review-final .span-item').length === 2"
    )
    page.locator(".span-review-final").scroll_into_view_if_needed()
    shot(page, f"span-review-final-{width}")
    assert page.evaluate(WIDEST, width) == []


def test_u_undoes_a_span_made_by_keyboard(page: Any, live_server: Any) -> None:
    project = project_create(slug="undo", name="Undo")
    span_schema_save(project=project, name="triage")
    trajectory = trajectory_with_steps(project, [f"Step {n}: try x = {n}." for n in range(6)])
    user = UserFactory.create(username="lead")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    page.set_viewport_size({"width": 1440, "height": 900})
    sign_in(page, live_server, "lead", PASSWORD)
    page.goto(live_server.url + reverse("trajectory-detail", args=[trajectory.pk]))
    page.wait_for_selector("#span-form")
    page.locator("body").click(position={"x": 1, "y": 1})
    page.keyboard.press("Shift+J")
    page.keyboard.press("4")
    page.wait_for_function("() => document.querySelectorAll('.span-bracket').length === 2")
    page.keyboard.press("u")
    page.wait_for_selector("#span-empty")
    assert page.locator("#span-status").inner_text() == "Undone: steps 0\u20131."
    # The brackets are drawn again on htmx:afterSettle, a moment after the swap that
    # shows #span-empty.
    page.wait_for_function("() => document.querySelectorAll('.span-bracket').length === 0")
    assert not SpanLabel.objects.exists()


@pytest.mark.parametrize("viewport", [(1440, 900), (390, 844)])
def test_brackets_sit_beside_the_step_card(
    page: Any, live_server: Any, viewport: tuple[int, int]
) -> None:
    project = project_create(slug="brackets", name="Brackets")
    span_schema_save(project=project, name="triage")
    trajectory = trajectory_with_steps(project, [f"Step {n}: try x = {n}." for n in range(6)])
    user = UserFactory.create(username="lead")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    state = labeling_state_for_user(user, trajectory.pk)
    span_label_set(state=state, schema="triage", start=0, end=3, value="useful exploration")
    span_label_set(state=state, schema="triage", start=1, end=2, value="regression")
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "lead", PASSWORD)
    page.goto(live_server.url + reverse("trajectory-detail", args=[trajectory.pk]))
    # Each bracket's right edge is within its lane's reach of the card's right edge, read
    # once all six hang on their steps (the span panel loads after the page and redraws).
    gaps = page.wait_for_function(
        """() => {
            const marks = [...document.querySelectorAll('.span-bracket')];
            const cards = marks.map(m => m.closest('.step')?.querySelector('.step-body'));
            if (marks.length !== 6 || cards.some(card => !card)) return null;
            return marks.map((m, i) => Math.round(
                m.getBoundingClientRect().right - cards[i].getBoundingClientRect().right));
        }"""
    ).json_value()
    assert all(0 < gap <= 24 for gap in gaps), gaps
    # The two lanes stay apart and every card has the same right edge.
    assert len(set(gaps)) == 2, gaps
    rights = page.eval_on_selector_all(
        "li.step > .step-body",
        "cards => cards.map(c => Math.round(c.getBoundingClientRect().right))",
    )
    assert len(set(rights)) == 1, rights
    page.locator('li.step[data-index="1"]').scroll_into_view_if_needed()
    shot(page, f"span-brackets-{width}")
    assert page.evaluate(WIDEST, width) == []


@pytest.mark.parametrize("viewport", [(1440, 900), (390, 844)])
def test_the_span_schemas_and_between_humans_pages_fit(
    page: Any, live_server: Any, viewport: tuple[int, int]
) -> None:
    project = project_create(slug="pages", name="Pages")
    span_schema_save(project=project, name="triage")
    trajectory = trajectory_with_steps(project, [f"Step {n}." for n in range(6)])
    people = {}
    for name in ("lead", "ann", "bea"):
        people[name] = UserFactory.create(username=name)
        role = Membership.Role.ADMIN if name == "lead" else Membership.Role.RESEARCHER
        MembershipFactory.create(user=people[name], project=project, role=role)
    for name, end in (("ann", 3), ("bea", 2)):
        state = labeling_state_for_user(people[name], trajectory.pk)
        span_label_set(state=state, schema="triage", start=0, end=end, value="regression")
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "lead", PASSWORD)
    page.goto(live_server.url + reverse("span-schemas", args=[project.slug]))
    assert page.locator(".key-clash").count() == 3
    shot(page, f"span-schemas-{width}")
    assert page.evaluate(WIDEST, width) == []
    assert page.evaluate(UNLABELLED) == []
    page.goto(live_server.url + reverse("compare-humans", args=[project.slug]))
    table = page.locator("#humans-spans-1")
    table.scroll_into_view_if_needed()
    assert "ann · bea" in table.inner_text()
    shot(page, f"humans-spans-{width}")
    assert page.evaluate(WIDEST, width) == []
