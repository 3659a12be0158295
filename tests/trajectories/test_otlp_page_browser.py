"""A trace that arrives over OTLP, seen in a real browser: its trajectory page says it is
still receiving, fits a phone's width, and says finished once the quiet time passed."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from accounts.services import api_token_create
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory
from tests.screens import WIDEST, shot
from tests.trajectories import otlp_bodies as bodies
from trajectories.models import Membership, Project, Trajectory
from trajectories.services.assembly import live_traces_assemble

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


def test_a_live_trace_page_says_receiving_then_finished(
    page: Any, live_server: Any, project: Project, settings: Any
) -> None:
    user = UserFactory.create(username="reader")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    token = api_token_create(user=user, name="agent")[1]
    response = Client().post(
        "/v1/traces",
        bodies.protobuf_body(bodies.agent_spans(0), project=project.slug),
        content_type="application/x-protobuf",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 200
    live_traces_assemble()
    trajectory = Trajectory.objects.get(project=project)

    sign_in(page, live_server, "reader", PASSWORD)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_server.url}/t/{trajectory.pk}/")
    assert page.inner_text("#live-state") == "live · receiving"
    assert "The answer is 42." in page.inner_text("main")
    shot(page, "otlp-live-trace-1440")
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    assert page.is_visible("#live-state")
    assert page.evaluate(WIDEST, 390) == []
    shot(page, "otlp-live-trace-390")

    settings.STEPSCOPE_OTLP_QUIET_SECONDS = 0
    page.reload()
    assert page.inner_text("#live-state") == "live trace · finished"
