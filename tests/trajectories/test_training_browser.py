"""RL rollouts in a real browser, on a desktop and a phone: the trajectory page's line of
training facts per step, the list's RL filters and columns, and the project page's
followed folders. Each page fits the screen and its controls have names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory
from tests.screens import UNLABELLED, WIDEST, shot
from tests.trajectories.test_formats_trainers import rllm_episode
from trajectories.models import Membership, Trajectory
from trajectories.services import follow_pass_run, follow_source_set, project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_rl_rollouts_read_well_on_each_page(
    page: Any, live_server: Any, tmp_path: Path, width: int, height: int
) -> None:
    project = project_create(slug="rl", name="RL rollouts")
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    folder = tmp_path / "episodes"
    folder.mkdir()
    (folder / "40.jsonl").write_text(
        "".join(json.dumps(rllm_episode(n, n == 0)) + "\n" for n in range(3))
    )
    follow_pass_run(source=follow_source_set(project=project, path=folder, source_format="rllm"))
    trajectory = Trajectory.objects.get(external_id="task-7:0/uid-0")

    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "researcher", PASSWORD)

    page.goto(live_server.url + reverse("trajectory-detail", args=[trajectory.pk]))
    facts = page.locator(".step-training").first
    assert "adv 0.500" in facts.inner_text()
    assert "policy 7" in facts.inner_text()
    assert page.evaluate(WIDEST, width) == []
    shot(page, f"rl-trajectory-{width}")

    list_url = reverse("trajectory-list", args=[project.slug])
    page.goto(live_server.url + list_url + "?policy=5..9&min_advantage=0.5")
    assert page.locator("#trajectory-rows tr").count() == 3
    assert page.locator("details.more-filters[open] summary", has_text="RL training").count() == 1
    assert page.evaluate(UNLABELLED) == []
    shot(page, f"rl-list-{width}")

    page.goto(live_server.url + reverse("project-home", args=[project.slug]))
    section = page.locator("#follow-sources")
    assert "40.jsonl" in section.inner_text()
    assert "up to date" in section.inner_text()
    section.scroll_into_view_if_needed()
    shot(page, f"rl-home-{width}")
    # The folder's long path wraps; the files' table scrolls sideways on a phone, as every
    # table of the page does.
    summary = section.locator(".follow-source > p").first.bounding_box()
    assert summary["x"] + summary["width"] <= width
