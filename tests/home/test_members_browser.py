"""A new team's first minutes in a real browser: a user creates a project from the
project list, lands on its home as admin, opens the members page, adds a colleague,
changes the colleague's role and is refused removing the last admin. The pages fit a
phone's width."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from tests.browser import sign_in
from tests.factories import UserFactory
from tests.screens import UNLABELLED, WIDEST, shot
from trajectories.models import Membership, MembershipEvent
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


def reads_well(page: Any) -> bool:
    """One h1, every control labelled, nothing wider than the screen."""
    assert page.locator("h1").count() == 1
    assert page.evaluate(UNLABELLED) == []
    assert page.evaluate(WIDEST, page.viewport_size["width"]) == []
    return True


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_create_a_project_then_manage_its_members(
    page: Any, live_server: Any, width: int, height: int
) -> None:
    UserFactory.create(username="founder")
    colleague = UserFactory.create(username="colleague")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "founder", PASSWORD)
    page.goto(live_server.url + reverse("project-list"))
    page.wait_for_selector("#project-form")
    page.fill("#id_name", "Math PRM")
    page.fill("#id_slug", "math-prm")
    page.fill("#id_guidelines", "Mark the first wrong step.")
    assert reads_well(page)
    shot(page, f"project-create-{width}")
    page.click("#project-form button[type=submit]")
    page.wait_for_selector("#members-link")
    assert "you are its admin" in page.inner_text("#flash")

    page.click("#members-link")
    page.wait_for_selector("#member-form")
    page.fill("#id_username", "colleague")
    page.select_option("#id_role", "annotator")
    page.click("#member-form button[type=submit]")
    page.wait_for_selector("#member-table >> text=colleague")
    membership = Membership.objects.get(user=colleague)
    page.select_option(f"#role-{membership.pk}", "researcher")
    page.click(f"#member-{membership.pk} .member-role-form button")
    page.wait_for_selector("#member-events >> text=changed colleague from annotator to researcher")
    assert Membership.objects.get(user=colleague).role == "researcher"

    founder = Membership.objects.get(user__username="founder")
    page.click(f"#member-{founder.pk} .member-actions button")
    page.wait_for_selector("#member-error")
    assert "last admin" in page.inner_text("#member-error")
    assert reads_well(page)
    shot(page, f"members-{width}")
    assert MembershipEvent.objects.filter(project__slug="math-prm").count() == 3


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_an_invite_link_lets_a_newcomer_join_once(
    page: Any, live_server: Any, width: int, height: int
) -> None:
    admin = UserFactory.create(username="founder")
    project = project_create(slug="math-prm", name="Math PRM", owner=admin)
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "founder", PASSWORD)
    page.goto(live_server.url + reverse("member-list", args=[project.slug]))
    page.select_option("#invite-role", "researcher")
    page.click("#invite-form button[type=submit]")
    link = page.inner_text("#invite-link code")
    assert reads_well(page)
    shot(page, f"members-invite-{width}")

    newcomer = page.context.browser.new_context(viewport={"width": width, "height": height})
    tab = newcomer.new_page()
    tab.goto(link)
    tab.fill("#id_username", "newbie")
    tab.fill("#id_password", "a long passphrase 42")
    tab.fill("#id_password_again", "a long passphrase 42")
    assert reads_well(tab)
    shot(tab, f"invite-accept-{width}")
    tab.click("#invite-form button[type=submit]")
    tab.wait_for_selector("#project-stats")
    assert "you are researcher" in tab.inner_text("#flash")
    assert Membership.objects.get(user__username="newbie").role == "researcher"

    tab.goto(link)
    assert "already been used" in tab.inner_text("#invite-unusable")
    assert reads_well(tab)
    shot(tab, f"invite-used-{width}")
    newcomer.close()
