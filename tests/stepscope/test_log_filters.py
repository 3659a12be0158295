"""A refused request logs one line and no traceback; a server error keeps its traceback."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator

import pytest
from django.test import Client
from django.urls import reverse

from stepscope.log_filters import ClientErrorsWithoutTraceback
from tests.factories import MembershipFactory, UserFactory
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def console() -> Iterator[io.StringIO]:
    """What the console handler of ``settings.LOGGING`` writes, while the test runs."""
    handler = next(
        h
        for h in logging.getLogger().handlers
        if any(isinstance(f, ClientErrorsWithoutTraceback) for f in h.filters)
    )
    assert isinstance(handler, logging.StreamHandler)
    stream = io.StringIO()
    previous = handler.setStream(stream)
    try:
        yield stream
    finally:
        handler.setStream(previous)


def test_a_403_logs_a_line_without_a_traceback(client: Client, console: io.StringIO) -> None:
    project = project_create(slug="p", name="P")
    user = UserFactory.create(username="ann")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.ANNOTATOR)
    client.force_login(user)
    response = client.get(reverse("import-new", args=[project.slug]))
    assert response.status_code == 403
    logged = console.getvalue()
    assert "Forbidden" in logged and "/imports/new/" in logged
    assert "Traceback" not in logged


def test_a_server_error_keeps_its_traceback() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = logging.LogRecord("django.request", logging.ERROR, "", 0, "x", None, None)
        record.exc_info = sys.exc_info()
    record.status_code = 500
    assert ClientErrorsWithoutTraceback().filter(record)
    assert record.exc_info is not None
