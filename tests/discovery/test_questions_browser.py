"""A question in plain language in Chromium, answered by a real worker against the
stand-in judge endpoint: a researcher opens it from the failures page, asks, watches the
answer arrive, follows the matching step, and opens the judge's filters as the list."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.urls import reverse

from scoring import services
from tests.browser import sign_in
from tests.conftest import JUDGE_KEY_ENV, JUDGE_NAME, OpenAIServer
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.screens import shot
from trajectories.models import Membership, Step
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.celery, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-for-tests"
QUESTION = "Where did the agent give up on the customer?"


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_a_researcher_asks_and_gets_trajectories_with_reasons(
    page: Any,
    live_server: Any,
    celery_worker: object,
    openai_server: OpenAIServer,
    width: int,
    height: int,
) -> None:
    project = project_create(slug="airline", name="Airline agent")
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    gave_up = trajectory_with_steps(
        project,
        ["Let me look up the booking.", "I am unable to assist with changing it."],
        external_id="gave-up-" + "0123456789abcdef" * 4,
        success=False,
    )
    trajectory_with_steps(
        project,
        ["The lookup failed.", "Retrying with the other id."],
        external_id="retried",
        success=False,
    )
    services.judge_create(
        name="asker",
        model_ref=JUDGE_NAME,
        project=project,
        parameters={
            "backend": "remote",
            "base_url": openai_server.base_url,
            "api_key_env": JUDGE_KEY_ENV,
            "max_tokens": 64,
        },
    )
    reason = "The agent refuses instead of changing the booking."
    openai_server.control(
        max_context=8192,
        replies_for=[
            {
                "contains": "unable to assist",
                "reply": json.dumps({"match": True, "step": 1, "reason": reason}),
            },
            {
                "contains": "Retrying",
                "reply": json.dumps({"match": False, "step": None, "reason": "It retries."}),
            },
            {
                "contains": QUESTION,
                "reply": json.dumps(
                    {"filters": {"outcome": "failure"}, "criterion": "The agent stops trying."}
                ),
            },
        ],
    )
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "researcher", PASSWORD)
    page.goto(live_server.url + reverse("failure-overview", args=[project.slug]))
    page.click("#ask-a-question")
    page.wait_for_url("**/questions/")
    shot(page, f"questions-empty-{width}")
    page.fill("textarea[name=text]", QUESTION)
    page.click("#question-ask")
    page.wait_for_url("**/questions/*/")
    page.locator("#question-status", has_text="done").wait_for(timeout=60_000)
    assert page.locator("#question-filters").inner_text() == "origin=&outcome=failure"
    assert page.locator("#question-criterion").inner_text() == "The agent stops trying."
    rows = page.locator("#question-matches tbody tr")
    assert rows.count() == 1
    assert reason in rows.first.inner_text()
    assert page.locator("#question-unmatched").inner_text().startswith("1 read")
    shot(page, f"question-answer-{width}")

    step = Step.objects.get(trajectory=gave_up, index=1)
    rows.first.locator("a", has_text="step 1").click()
    page.wait_for_url(f"**/t/{gave_up.pk}/#step-{step.pk}")
    page.go_back()
    page.click("#question-open-list")
    page.wait_for_url("**outcome=failure**")
    listed = page.locator("#trajectory-rows tr[id] td:first-child a:first-child").all_inner_texts()
    assert sorted(listed) == sorted([gave_up.external_id, "retried"])
