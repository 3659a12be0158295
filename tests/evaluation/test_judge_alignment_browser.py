"""The judge alignment page in Chromium: the versions' figures, switching the label source
(an HTMX reload of the body), ticking a disagreement and making a version from it; the page
at 1440 and 390 px."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from scoring.models import JudgePrompt
from tests.browser import sign_in
from tests.evaluation.test_judge_alignment import steps_of

# The fixture, imported under its own name so pytest finds it here.
from tests.evaluation.test_judge_alignment import world as world
from tests.factories import MembershipFactory, UserFactory
from tests.screens import UNLABELLED, WIDEST, shot
from trajectories.models import Membership, Project

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_judge_alignment_page(page: Any, live_server: Any, world: dict[str, Any]) -> None:
    project: Project = world["a"].project
    judge = world["judge"]
    user = UserFactory.create(username="reader")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    sign_in(page, live_server, "reader", "pw-for-tests")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(live_server.url + reverse("scoring-section", args=[project.slug]))
    page.click("#judge-list a")
    page.wait_for_selector("#alignment-versions")
    assert page.inner_text("#version-1 .version-kappa").split()[0] == "0.70"
    assert page.inner_text("#version-1 .version-parse") == "1"
    assert page.locator(".alignment-disagreement").count() == 1
    assert page.evaluate(UNLABELLED) == []
    shot(page, "judge-alignment-1440")
    # Another source reloads the body in place (and the address follows).
    page.select_option("#alignment-source", "human:ann")
    page.wait_for_url("**source=human%3Aann**")
    assert page.inner_text("#version-1 .version-kappa").split()[0] == "0.70"
    page.check(f"input[name=step][value='{steps_of(world['a'])[1].pk}']")
    page.click("#alignment-examples-form button[type=submit]")
    page.wait_for_selector("#alignment-new-version")
    assert "Version 2" in page.inner_text("#alignment-new-version")
    made = JudgePrompt.objects.get(scorer=judge, version=2)
    assert made.example_steps == [steps_of(world["a"])[1].pk]
    shot(page, "judge-alignment-new-version-1440")
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    shot(page, "judge-alignment-390")
    assert page.evaluate(WIDEST, 390) == []
    page.locator("#alignment-disagreements").scroll_into_view_if_needed()
    shot(page, "judge-alignment-disagreements-390")
