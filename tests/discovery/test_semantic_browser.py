"""Semantic search in Chromium: a researcher types a paraphrase in "Similar to" and finds
the refusal full-text search misses, then follows "more like this" from one of its steps."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from discovery.services import embeddings_build
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.screens import shot
from trajectories.models import Membership, Step
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-for-tests"


def rows(page: Any) -> list[str]:
    return page.locator("#trajectory-rows tr[id] td:first-child a:first-child").all_inner_texts()


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_a_paraphrase_finds_the_refusal_and_more_like_this(
    page: Any, live_server: Any, width: int, height: int
) -> None:
    project = project_create(slug="airline", name="Airline agent")
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    refusal = trajectory_with_steps(
        project,
        ["Let me look up the booking.", "I am unable to assist with changing it."],
        external_id="refusal-" + "0123456789abcdef" * 4,
        success=False,
    )
    trajectory_with_steps(project, ["Sorry, I cannot help with that."], external_id="sorry")
    trajectory_with_steps(project, ["The forecast says rain."], external_id="weather")
    embeddings_build(project_id=project.pk)
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "researcher", PASSWORD)
    page.goto(live_server.url + reverse("trajectory-list", args=[project.slug]))
    page.fill("input[name=q]", "cannot help")
    page.locator("#trajectory-filters button[type=submit]").first.click()
    page.wait_for_url("**q=cannot+help**")
    assert rows(page) == ["sorry"]  # full-text search misses the refusal
    page.fill("input[name=q]", "")
    page.fill("input[name=similar]", "the agent cannot help the customer")
    page.locator("#trajectory-filters button[type=submit]").first.click()
    page.wait_for_url("**similar=the+agent**")
    assert set(rows(page)[:2]) == {refusal.external_id, "sorry"}
    shot(page, f"semantic-list-{width}")

    step = Step.objects.get(trajectory=refusal, index=1)
    page.goto(live_server.url + reverse("trajectory-detail", args=[refusal.pk]))
    page.locator(f"#step-{step.pk} a.more-like-this").click()
    page.wait_for_url(f"**similar_step={step.pk}**")
    assert page.locator("#similar-step").inner_text().strip() == f"More like step {step.pk}"
    assert rows(page)[0] == "sorry"
    shot(page, f"semantic-more-like-{width}")
