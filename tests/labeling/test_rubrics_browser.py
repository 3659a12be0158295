"""A rubric with evidence and an episode verdict, marked from the keyboard in a real
browser: b picks a criterion, m cycles its mark, e links the current step (and Alt+click
another), v goes to the episode verdict, whose answers are typed and saved with
Ctrl+Enter. At a laptop's and a phone's size, with no sideways scrolling on the phone."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from labeling.models import EpisodeVerdict, RubricMark
from labeling.services.rubrics import rubric_save
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.screens import WIDEST, shot
from trajectories.models import Membership, Step
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"
LONG = "Cites the tool result it relies on, " + "verbatim-and-without-spaces-" * 6


@pytest.mark.parametrize("viewport", [(1440, 900), (390, 844)])
def test_rubric_with_evidence_and_episode_verdict_by_keyboard(
    page: Any, live_server: Any, viewport: tuple[int, int]
) -> None:
    project = project_create(slug="rubric", name="Rubric")
    schema = project.label_schemas.get()
    schema.error_tags = ["logic error", "wrong tool"]
    schema.save(update_fields=["error_tags"])
    run = trajectory_with_steps(project, ["Plan.", "Search.", "Answer 42."], success=False)
    for step, agent in zip(
        run.steps.order_by("index"), ["planner", "searcher", "planner"], strict=True
    ):
        Step.objects.filter(pk=step.pk).update(agent=agent)
    user = UserFactory.create(username="lead")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    rubric = rubric_save(
        project=project,
        user_id=None,
        criteria=[{"text": "Plans before searching", "weight": 2}, {"text": LONG}],
    )
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "lead", PASSWORD)
    page.goto(live_server.url + reverse("trajectory-detail", args=[run.pk]))
    page.wait_for_selector("#rubric .rubric-row")
    page.wait_for_selector("#episode .episode-form")

    page.keyboard.press("b")  # the first criterion
    page.keyboard.press("m")  # met
    page.wait_for_selector(f'#criterion-{rubric.pk}-0[data-mark="met"]')
    page.keyboard.press("j")  # a step
    current = page.eval_on_selector("[data-row].is-current", "row => row.dataset.index")
    page.keyboard.press("e")  # its evidence
    page.wait_for_selector(f'#criterion-{rubric.pk}-0 [data-evidence-step="{current}"]')
    other = "2" if current != "2" else "0"
    page.locator(f'[data-row][data-index="{other}"]').click(modifiers=["Alt"])
    page.wait_for_selector(f'#criterion-{rubric.pk}-0 [data-evidence-step="{other}"]')
    page.keyboard.press("b")  # the second criterion
    page.keyboard.press("m")
    page.keyboard.press("m")  # met -> not met, typed at once: the second reads the first
    page.wait_for_selector(f'#criterion-{rubric.pk}-1[data-mark="not_met"]')
    # The criterion stays current across the saves.
    assert page.get_attribute(".rubric-current", "id") == f"criterion-{rubric.pk}-1"
    # Weight 2 met, weight 1 not met.
    assert page.inner_text(f"#rubric-score-{rubric.pk}") == "score 0.67"
    shot(page, f"rubric-marked-{width}")

    page.keyboard.press("v")  # the episode's outcome
    assert page.evaluate("document.activeElement.name") == "outcome"
    page.keyboard.type("fa")  # failure
    page.keyboard.press("Tab")
    page.keyboard.type("w")  # wrong tool
    page.keyboard.press("Tab")
    page.keyboard.type("Searched before <planning>.")
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("#episode-status")

    marks = {m.criterion: (m.mark, m.evidence) for m in RubricMark.objects.all()}
    assert marks == {0: ("met", sorted([int(current), int(other)])), 1: ("not_met", [])}
    verdict = EpisodeVerdict.objects.get()
    assert (verdict.agent, verdict.outcome, verdict.failure_mode) == ("", "failure", "wrong tool")
    assert verdict.critique == "Searched before <planning>."
    # The run has two agents: a verdict form for each besides the episode's.
    assert page.locator("#episode .episode-form").count() == 3
    assert page.evaluate(WIDEST, width) == []
    shot(page, f"rubric-episode-{width}")

    # The rubric page (a researcher reads it; only admins save) fits the screen too.
    page.goto(live_server.url + reverse("rubric-edit", args=[project.slug]))
    assert page.input_value("#rubric-criteria textarea >> nth=1") == LONG
    assert page.evaluate(WIDEST, width) == []
    shot(page, f"rubric-page-{width}")
