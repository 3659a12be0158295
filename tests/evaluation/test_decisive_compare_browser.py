"""The decisive-failures compare page in Chromium, on the real Who&When labels against a
model's verdicts: the numbers shown, and the page at 1440 and 390 px."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from scoring import prm
from scoring.models import Scorer
from scoring.services import VerdictInput, failure_verdicts_write
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory
from tests.labeling.test_decisive import who_and_when
from tests.screens import UNLABELLED, WIDEST, shot
from tests.trajectories.test_formats_mapped import WHO_AND_WHEN_COUNTS
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_decisive_compare_page(page: Any, live_server: Any) -> None:
    project = project_create(slug="ww", name="Who and When")
    logs = {name: who_and_when(project, name) for name in WHO_AND_WHEN_COUNTS}
    judge = Scorer.objects.create(project=project, name="judge", kind=prm.EXTERNAL)
    failure_verdicts_write(
        scorer=judge,
        verdicts=[
            VerdictInput(logs["Hand-Crafted/1.json"].pk, "WebSurfer", 13),
            VerdictInput(logs["Hand-Crafted/24.json"].pk, "Orchestrator", 1),
            VerdictInput(logs["Algorithm-Generated/1.json"].pk, "", 2),
        ],
    )
    user = UserFactory.create(username="reader")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.ANNOTATOR)
    sign_in(page, live_server, "reader", "pw-for-tests")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(live_server.url + reverse("compare", args=[project.slug]))
    page.click("text=Decisive failures")
    page.wait_for_selector("#decisive-metrics")
    # Agents 2 of 3, steps 1 of 3 exact, 2 of 3 within one step.
    agent = page.inner_text("#decisive-agent-accuracy td:nth-child(2)")
    assert agent.split() == ["67%", "2", "of", "3"]
    assert page.inner_text("#decisive-step-accuracy td:nth-child(2)").startswith("33%")
    page.fill("#id_k", "2")
    page.click("#decisive-compare-form button[type=submit]")
    page.wait_for_selector("#decisive-step-within:has-text('±2')")
    assert page.inner_text("#decisive-step-within td:nth-child(2)").split()[0] == "100%"
    assert page.evaluate(UNLABELLED) == []
    shot(page, "decisive-compare-1440")
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    shot(page, "decisive-compare-390")
    assert page.evaluate(WIDEST, 390) == []
    page.locator("#decisive-pairs").scroll_into_view_if_needed()
    shot(page, "decisive-compare-pairs-390")
