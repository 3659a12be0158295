"""Join as me in a real browser: a signed-in user opens an invite link, sees "Join
<project> as <you>" rather than a password form, joins with one click and lands on the
project as its new member."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from tests.browser import sign_in
from tests.factories import UserFactory
from tests.screens import UNLABELLED, WIDEST, shot
from trajectories.models import Membership
from trajectories.services import invite_create, project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_a_signed_in_user_joins_as_themselves(
    page: Any, live_server: Any, width: int, height: int
) -> None:
    owner = UserFactory.create(username="owner")
    project = project_create(slug="math-prm", name="Math PRM", owner=owner)
    invite, secret = invite_create(project=project, actor=owner, role="researcher")
    colleague = UserFactory.create(username="colleague")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "colleague", "pw-for-tests")

    page.goto(live_server.url + reverse("invite-accept", args=[secret]))
    button = page.wait_for_selector("#invite-join-form button[type=submit]")
    assert button.inner_text() == "Join Math PRM as colleague"
    assert page.locator("input[name=password]").count() == 0
    assert page.evaluate(UNLABELLED) == []
    assert page.evaluate(WIDEST, width) == []
    shot(page, f"invite-join-{width}")
    button.click()
    page.wait_for_selector("#flash")
    assert "you are researcher" in page.inner_text("#flash")
    assert Membership.objects.get(user=colleague, project=project).role == "researcher"
    invite.refresh_from_db()
    assert invite.used_by == colleague
