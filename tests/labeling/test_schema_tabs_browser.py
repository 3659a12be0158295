"""The schema page of a project labelled in several dimensions, in a real browser at a
laptop's and a phone's width: an admin adds a schema with a long name, lands on its tab,
and the tabs wrap rather than push the page wider than the screen."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from labeling.models import LabelSchema
from labeling.services import label_schema_create
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory
from tests.screens import WIDEST, shot
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"
LONG = "tool-choice-when-the-agent-could-have-answered-from-memory-instead-of-searching"


@pytest.mark.parametrize("viewport", [(1440, 900), (390, 844)])
def test_an_admin_adds_a_schema_and_edits_it_on_its_tab(
    page: Any, live_server: Any, viewport: tuple[int, int]
) -> None:
    project = project_create(slug="tabs", name="Tabs")
    admin = UserFactory.create(username="admin", password=PASSWORD)
    MembershipFactory.create(user=admin, project=project, role=Membership.Role.ADMIN)
    severity = [
        {"value": v, "name": n, "key": k} for v, n, k in ((1, "minor", "7"), (2, "major", "8"))
    ]
    label_schema_create(project=project, name="severity", kind="ordinal", values=severity)
    page.set_viewport_size({"width": viewport[0], "height": viewport[1]})
    sign_in(page, live_server, "admin", PASSWORD)
    page.goto(live_server.url + reverse("schema-edit", args=[project.slug]))
    page.fill("#schema-add-form input[name=name]", LONG)
    page.select_option("#schema-add-form select[name=kind]", "binary")
    page.click("#schema-add-form button[type=submit]")
    page.wait_for_url(f"**schema={LONG}")
    current = page.locator('#schema-tabs a[aria-current="page"]')
    assert current.inner_text() == LONG
    assert page.locator("#schema-tabs a").count() == 3
    shot(page, f"schema-tabs-{viewport[0]}")
    assert page.evaluate("document.documentElement.scrollWidth") <= viewport[0], page.evaluate(
        WIDEST, viewport[0]
    )
    assert LabelSchema.objects.filter(project=project, name=LONG, kind="binary").exists()
