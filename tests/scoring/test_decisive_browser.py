"""The trajectory page in Chromium on a real Who&When chat (AG2): the decisive failure set
from the keyboard (j to the step, d, the reason, Ctrl+Enter), and each agent's Shapley
credit (a real run over agents with a tiny model) on its lane header; at 1440 and 390 px."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.urls import reverse

from labeling.models import TrajectoryLabel
from scoring import services
from scoring.models import AttributionRun, Scorer, StepCredit
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory
from tests.labeling.test_decisive import WHO_AND_WHEN_DECISIVE
from tests.screens import UNLABELLED, shot
from tests.trajectories.test_formats_mapped import WHO_AND_WHEN_DIR
from trajectories.models import Membership, Trajectory
from trajectories.services import project_create, trajectory_import

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


PAST_EDGE = """selector => Array.from(document.querySelectorAll(selector))
  .flatMap(box => [box, ...box.querySelectorAll('*')])
  .filter(el => el.getBoundingClientRect().right > window.innerWidth + 1)
  .map(el => el.tagName + '.' + el.className)"""


def current_index(page: Any) -> int | None:
    value = page.eval_on_selector_all("li.is-current", "rows => rows.map(r => r.dataset.index)")
    return int(value[0]) if value else None


def test_decisive_failure_from_the_keyboard_and_agent_credit_on_the_lanes(
    page: Any, live_server: Any, make_scorer: Callable[..., Scorer]
) -> None:
    project = project_create(slug="ww", name="Who and When")
    trajectory_import(
        project=project,
        source_format="mapped",
        path=WHO_AND_WHEN_DIR / "Algorithm-Generated" / "1.json",
        mapping=WHO_AND_WHEN_DECISIVE,
    )
    trajectory = Trajectory.objects.get(project=project)
    scorer = make_scorer(project=project)
    run = services.attribution_run_start(
        project=project, method="shapley", scorer=scorer, parameters={"players": "agents"}
    )
    services.attribution_run_plan(run_id=run.pk)
    for chunk_id in run.chunks.values_list("pk", flat=True):
        services.attribution_chunk_run(chunk_id=chunk_id)
    run.refresh_from_db()
    assert run.status == AttributionRun.Status.DONE, run.error
    values = {
        c.detail["agent"]: c.detail["agent_value"]
        for c in StepCredit.objects.filter(run=run)
        if c.detail and "agent" in c.detail
    }
    assert set(values) == {"Excel_Expert", "BusinessLogic_Expert", "DataVerification_Expert"}

    user = UserFactory.create(username="reader")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    sign_in(page, live_server, "reader", "pw-for-tests")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(live_server.url + reverse("trajectory-detail", args=[trajectory.pk]))
    page.wait_for_selector("#decisive-form")

    # Each agent's lane header (its filter) shows its Shapley value, once the evidence loads.
    page.wait_for_selector("#agent-credits")
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('.agent-filter .agent-credit'))"
        ".some(s => s.textContent)"
    )
    shown = dict(
        page.eval_on_selector_all(
            ".agent-filter",
            "labels => labels.map(l => [l.querySelector('input').value,"
            " l.querySelector('.agent-credit').textContent])",
        )
    )
    for agent, value in values.items():
        assert shown[agent] == f"{value:+.3f}"
    assert shown["Computer_terminal"] == ""  # an input: not a player
    page.check("[data-lanes]")
    page.evaluate("document.activeElement.blur()")  # keys typed into a checkbox do nothing

    # j to step 2 (BusinessLogic_Expert's turn), d, a reason, Ctrl+Enter.
    for _ in range(6):
        if current_index(page) == 2:
            break
        page.keyboard.press("j")
    assert current_index(page) == 2
    page.keyboard.press("d")
    assert page.evaluate("document.activeElement.id") == "decisive-reason"
    assert page.input_value("#decisive-step") == "2"
    page.keyboard.type("It checked the column, not the count.")
    shot(page, "decisive-typing-1440")
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("#decisive-status:has-text('Saved: BusinessLogic_Expert at step 2')")
    mine = TrajectoryLabel.objects.get(trajectory=trajectory, annotator=user)
    assert (mine.decisive_agent, mine.decisive_step) == ("BusinessLogic_Expert", 2)
    assert mine.decisive_reason == "It checked the column, not the count."
    # Another agent and no step: the agent alone.
    page.select_option("#decisive-agent", "Excel_Expert")
    page.fill("#decisive-step", "")
    page.fill("#decisive-reason", "")
    page.click("#decisive-save")
    page.wait_for_selector("#decisive-status:has-text('Saved: Excel_Expert')")
    page.locator("#decisive").scroll_into_view_if_needed()
    shot(page, "decisive-saved-1440")
    assert page.evaluate(UNLABELLED) == []

    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    page.wait_for_selector("#decisive-form")
    page.wait_for_selector("#agent-credits")
    page.locator("#decisive").scroll_into_view_if_needed()
    shot(page, "decisive-390")
    # Code blocks scroll inside their own box; the panel and the lane headers fit.
    assert page.evaluate(PAST_EDGE, "#decisive, #timeline-tools, #agent-credits") == []
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.locator("#timeline-tools").scroll_into_view_if_needed()
    shot(page, "agent-credit-390")
