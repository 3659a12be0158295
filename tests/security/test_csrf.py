"""CSRF on every state-changing request. The routes come from the resolver: every one
that does not refuse the admin's POST (a 405 from ``require_GET`` and the like, as the
access matrix of test_authorization.py states and that test checks on every route) is
posted to by a signed-in admin without the token (403, plain and as HTMX), and again
with the token the page itself carries in ``<body hx-headers>`` (anything but a CSRF
refusal). So a new POST view is covered the day it is added.

The API is posted to with the session cookie, as the browser's Swagger page would: the
session must not be enough. A script's token (``Authorization: Token ...``) is not sent
by browsers on their own, so token calls need no CSRF token (DRF's design)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.security.test_authorization import ACCESS
from tests.security.world import (
    ROLES,
    Route,
    Visitors,
    World,
    body,
    build_world,
    project_routes,
)

pytestmark = pytest.mark.django_db


def _post_routes() -> list[Route]:
    """Routes that take a POST: the admin's POST (no CSRF checks) is not a 405 in
    ``ACCESS``, which lists every route and which test_authorization.py holds each route's
    answers to. Read from there, not asked again of every route."""
    admin = ROLES.index("admin")
    return [
        route for route in project_routes() if ACCESS[route.key]["POST"].split()[admin] != "405"
    ]


def _page_token(visitors: Visitors, world: World) -> str:
    """The token the trajectory page hands to HTMX (``hx-headers`` on ``<body>``)."""
    page = next(r for r in project_routes() if r.key == "trajectory-detail")
    response = visitors.request(page, "admin", "GET")
    assert response.status_code == 200
    match = re.search(r"<body hx-headers='([^']*)'>", body(response))
    assert match, "the page carries no hx-headers with the CSRF token"
    return str(json.loads(match.group(1))["X-CSRFToken"])


def test_every_post_without_the_csrf_token_is_refused(tmp_path: Path) -> None:
    world = build_world(tmp_path)
    routes = _post_routes()
    keys = {route.key for route in routes}
    # The derivation found the writes (not an empty list that passes trivially).
    assert {"step-label", "trajectory-submit", "final-label", "api:label-list"} <= keys
    strict = Visitors(world, enforce_csrf_checks=True)
    accepted = []
    for route in routes:
        for htmx in (False, True):
            response = strict.request(route, "admin", "POST", htmx=htmx, session_api=True)
            if response.status_code == 401:
                # A route that takes tokens only (the OTLP receiver) does not honour the
                # session at all: a forged cross-site POST has nothing to ride on.
                continue
            if response.status_code != 403 or "CSRF" not in body(response):
                where = f"{route.path(world)}{' (htmx)' if htmx else ''}"
                accepted.append(f"{where}: {response.status_code}")
    assert not accepted, "POSTs accepted without a CSRF token:\n" + "\n".join(accepted)


def test_the_pages_token_lets_every_post_through(tmp_path: Path) -> None:
    world = build_world(tmp_path)
    routes = _post_routes()
    strict = Visitors(world, enforce_csrf_checks=True)
    token = _page_token(strict, world)
    refused = []
    for route in routes:
        for htmx in (False, True):
            response = strict.request(
                route,
                "admin",
                "POST",
                htmx=htmx,
                session_api=True,
                headers={"HTTP_X_CSRFTOKEN": token},
            )
            if response.status_code == 403 and "CSRF" in body(response):
                refused.append(f"{route.path(world)}{' (htmx)' if htmx else ''}")
    assert not refused, "POSTs refused despite the page's CSRF token:\n" + "\n".join(refused)
