"""A project's settings and deletion in a real browser: the admin renames the project
from its settings page, is refused a deletion with the wrong slug typed, then deletes it
and watches the deletion's page (polled while a real worker removes the rows) say what
was removed. The pages fit a phone's width."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from tests.browser import sign_in
from tests.factories import UserFactory
from tests.screens import UNLABELLED, WIDEST, shot
from trajectories.models import Project, Trajectory
from trajectories.services import project_create, trajectory_records_import

pytestmark = [pytest.mark.browser, pytest.mark.celery, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


def reads_well(page: Any) -> bool:
    """One h1, every control labelled, nothing wider than the screen."""
    assert page.locator("h1").count() == 1
    assert page.evaluate(UNLABELLED) == []
    assert page.evaluate(WIDEST, page.viewport_size["width"]) == []
    return True


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_rename_then_delete_a_project(
    page: Any, live_server: Any, celery_worker: object, width: int, height: int
) -> None:
    admin = UserFactory.create(username="keeper")
    project = project_create(slug="old-prm", name="Old PRM", owner=admin)
    records = [
        {"id": f"r{n}", "task": f"task {n}", "steps": [{"content": "a"}, {"content": "b"}]}
        for n in range(4)
    ]
    trajectory_records_import(project=project, records=records)
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "keeper", PASSWORD)
    page.goto(live_server.url + reverse("project-home", args=["old-prm"]))

    page.click("#settings-link")
    page.wait_for_selector("#settings-form")
    page.fill("#id_name", "Math PRM")
    page.fill("#id_guidelines", "Mark the **first** wrong step.")
    page.click("#settings-form button[type=submit]")
    page.wait_for_selector("#flash >> text=Settings saved")
    assert Project.objects.get(slug="old-prm").name == "Math PRM"
    assert "removes 4 trajectories and 8 steps" in page.inner_text("#delete-form")
    assert reads_well(page)
    shot(page, f"project-settings-{width}")

    page.fill("#id_confirm", "old")
    page.click("#delete-form button[type=submit]")
    page.wait_for_selector("#confirm-error")
    assert Project.objects.get(slug="old-prm").deleting_since is None
    page.locator("#delete-form").scroll_into_view_if_needed()
    assert reads_well(page)
    shot(page, f"project-delete-refused-{width}")
    page.fill("#id_confirm", "old-prm")
    page.click("#delete-form button[type=submit]")
    page.wait_for_selector("#deletion-removed", timeout=90_000)
    page.wait_for_selector("#deletion-status .badge >> text=done", timeout=90_000)
    removed = page.inner_text("#deletion-removed")
    assert "trajectories\n4" in removed.lower() and "steps\n8" in removed.lower()
    assert not Project.objects.filter(slug="old-prm").exists()
    assert not Trajectory.objects.exists()
    assert reads_well(page)
    shot(page, f"project-deletion-{width}")
