"""A scoring run no worker has taken yet (the demo's PRM run while the demo policy trains
on the gpu queue), in a real browser: its row says it waits for a worker on its queue,
not "0/0". At a laptop's and a phone's size."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from scoring.models import Scorer, ScoringRun
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory
from tests.screens import shot
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


@pytest.mark.parametrize("viewport", [(1440, 900), (390, 844)])
def test_a_queued_run_waits_for_a_worker_instead_of_0_of_0(
    page: Any, live_server: Any, viewport: tuple[int, int]
) -> None:
    project = project_create(slug="demo", name="Demo")
    scorer = Scorer.objects.create(project=project, name="small-prm", model_ref="x", queue="gpu")
    queued = ScoringRun.objects.create(project=project, scorer=scorer, kind="score")
    assert queued.status == "queued" and not queued.total
    user = UserFactory.create(username="lead")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "lead", PASSWORD)
    page.goto(live_server.url + reverse("scoring-section", args=[project.slug]))
    row = page.locator(f"#scoring-run-{queued.pk}")
    assert "waiting for a worker on the gpu queue" in row.inner_text()
    assert "0/0" not in row.inner_text()
    shot(page, f"scoring-queued-{width}")
