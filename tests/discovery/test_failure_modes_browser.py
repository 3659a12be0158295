"""Failure modes in Chromium: a researcher opens the failures page of a project with
failures, follows "Failure modes", sees each mode's size and example steps, and turns a
mode into a labeling queue with one click."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.urls import reverse

from discovery.mode_services import failure_mode_run_start, failure_modes_execute
from labeling.models import Queue, QueueItem
from tests.browser import sign_in
from tests.discovery.test_failure_modes import THEMES, failed_run
from tests.factories import MembershipFactory, UserFactory
from tests.screens import shot
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-for-tests"


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_open_the_modes_and_make_a_queue_from_one(
    page: Any, live_server: Any, width: int, height: int
) -> None:
    project = project_create(slug="airline", name="Airline agent")
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    for theme, texts in THEMES.items():
        for i, text in enumerate(texts):
            failed_run(project, f"{theme}-{i}", text, model_name=f"gpt-{i % 2}")
    run = failure_mode_run_start(project=project, user=user)
    run = failure_modes_execute(run_id=run.pk)
    assert run.status == "done", run.error
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "researcher", PASSWORD)
    page.goto(live_server.url + reverse("failure-overview", args=[project.slug]))
    page.click("#failure-modes-link")
    page.wait_for_url("**/failures/modes/")
    cards = page.locator(".failure-mode")
    assert cards.count() == 3
    first = cards.first
    assert re.search(r"3\s*·\s*33%", first.locator(".mode-size").inner_text())
    assert first.locator(".mode-examples li a").count() == 3
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    shot(page, f"failure-modes-{width}")
    first.scroll_into_view_if_needed()
    shot(page, f"failure-modes-card-{width}")
    mode = run.modes.first()
    assert mode is not None
    page.locator(f"#mode-{mode.pk} button", has_text="Make a queue").click()
    page.wait_for_url("**/q/**")
    queue = Queue.objects.get(project=project)
    assert set(
        QueueItem.objects.filter(queue=queue).values_list("trajectory_id", flat=True)
    ) == set(mode.members.values_list("trajectory_id", flat=True))
    assert queue.name in page.content()
    shot(page, f"failure-modes-queue-{width}")


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_group_the_notes_and_make_one_group_an_error_tag(
    page: Any, live_server: Any, width: int, height: int, openai_server: Any
) -> None:
    """An admin sees each mode's Export and Judge run buttons, groups the annotators'
    notes, reads a group's example notes and makes it an error tag of the schema."""
    from discovery.models import NoteRun
    from discovery.note_services import notes_execute
    from labeling.models import LabelSchema
    from tests.discovery.test_notes import NOTES, noted
    from tests.scoring.test_judge_runs import remote_judge

    project = project_create(slug="airline", name="Airline agent")
    user = UserFactory.create(username="admin")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.ADMIN)
    for theme, texts in THEMES.items():
        for i, text in enumerate(texts):
            failed_run(project, f"{theme}-{i}", text, model_name=f"gpt-{i % 2}")
    for theme, texts in NOTES.items():
        for i, text in enumerate(texts):
            noted(project, f"noted-{theme}-{i}", text * (3 if i == 0 else 1), user)
    remote_judge(project, openai_server, name="a-judge-with-a-rather-long-name")
    run = failure_modes_execute(run_id=failure_mode_run_start(project=project, user=user).pk)
    assert run.status == "done", run.error
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "admin", PASSWORD)
    url = live_server.url + reverse("failure-modes", args=[project.slug])
    page.goto(url)
    first = page.locator(".card.failure-mode").first
    assert first.locator("button", has_text="Judge run").count() == 1
    assert first.locator("button", has_text="Export…").count() == 1
    first.locator(".mode-actions").scroll_into_view_if_needed()
    shot(page, f"failure-modes-actions-{width}")
    page.locator("#notes").scroll_into_view_if_needed()
    shot(page, f"notes-empty-{width}")
    page.locator("#notes button", has_text="Group notes").click()
    page.wait_for_url("**/failures/modes/#notes")
    notes_execute(run_id=NoteRun.objects.get(project=project).pk)
    page.reload()  # the same address: a goto would only move to #notes
    groups = page.locator(".note-group")
    assert groups.count() == 3
    assert re.search(r"3\s*·\s*33%", groups.first.locator(".mode-size").inner_text())
    assert groups.first.locator(".mode-examples li").count() == 3
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.locator("#note-stats").scroll_into_view_if_needed()
    shot(page, f"notes-groups-{width}")
    form = groups.first.locator(".note-tag-form")
    form.scroll_into_view_if_needed()
    shot(page, f"notes-form-{width}")
    form.locator("input[name=tag]").fill("agent ignored a tool error")
    form.locator("button").click()
    page.wait_for_url("**/failures/modes/#notes")
    assert "agent ignored a tool error" in page.locator(".note-group").first.inner_text()
    schema = LabelSchema.objects.get(project=project, is_active=True)
    assert "agent ignored a tool error" in schema.error_tags and schema.version == 2
    page.locator(".note-group").first.scroll_into_view_if_needed()
    shot(page, f"notes-tagged-{width}")
