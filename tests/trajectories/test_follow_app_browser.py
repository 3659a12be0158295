"""The followed folders page in a real browser: an admin follows a folder through the
form, sees it listed with its files, and stops following it; nothing reaches past the
screen's edge on a laptop or a phone, and every control has a name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory
from tests.screens import UNLABELLED, WIDEST, shot
from tests.trajectories.test_follow import line
from trajectories.models import FollowSource, Membership
from trajectories.services import project_create
from trajectories.services.follow import follow_sweep

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


@pytest.mark.parametrize("viewport", [(1440, 900), (390, 844)])
def test_an_admin_follows_and_stops_following_a_folder(
    page: Any, live_server: Any, viewport: tuple[int, int], tmp_path: Path, settings: Any
) -> None:
    root = tmp_path / "trainer-runs"
    folder = root / "grpo-qwen-0.5b-run-with-a-rather-long-name" / "rollout_data"
    folder.mkdir(parents=True)
    (folder / "step-1.jsonl").write_text(line(1, 0) + line(1, 1))
    settings.STEPSCOPE_FOLLOW_ROOTS = [root.resolve()]
    project = project_create(slug="rl", name="RL")
    user = UserFactory.create(username="boss")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.ADMIN)
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "boss", PASSWORD)

    page.goto(live_server.url + reverse("project-settings", args=[project.slug]))
    page.click("#follow-sources-link")
    page.fill("#id_path", str(folder))
    page.select_option("#id_source_format", "verl")
    page.click("#follow-form button[type=submit]")
    page.wait_for_selector(".flash-message")
    source = FollowSource.objects.get(project=project)
    assert source.by_worker
    follow_sweep()  # what the worker's periodic task does
    page.reload()
    assert page.locator(f"#followed-file-{source.files.get().pk}").is_visible()
    assert "2 trajectories imported" in page.inner_text(f"#follow-source-{source.pk}")
    # The files' table scrolls in its own box on a phone; nothing else is wider.
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width
    assert page.evaluate(WIDEST.replace("body *", "body *:not(.table-scroll *)"), width) == []
    assert page.evaluate(UNLABELLED) == []
    shot(page, f"follow-sources-{width}")

    page.click(f"#follow-source-remove-{source.pk}")
    page.wait_for_selector("#no-follow-sources")
    assert not FollowSource.objects.filter(project=project).exists()
