"""Junk in every query parameter and form field the code reads: a NUL byte, a number
beyond bigint, a negative number, words where numbers go and a very long string, on
every route (pages, HTMX partials, the API; GET and POST), as a project admin and as
an annotator of a blind project. Nothing may answer with a server error. The parameter
names are read from the views, APIs, forms and serializers, so a new parameter is
covered the day it is added."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test.client import BOUNDARY, encode_multipart
from rest_framework.settings import api_settings

from tests.conftest import REPO_ROOT
from tests.security.world import Route, Visitors, build_world, project_routes

pytestmark = pytest.mark.django_db

JUNK = ["\x00", "99999999999999999999", "-1", "not-a-number", "x" * 10_000]
APPS = ("trajectories", "labeling", "scoring", "rollouts", "stepscope")
READS = [
    # request.GET.get("task"), query_params.get("project"), params.get("value")...
    re.compile(r"""(?:GET|POST|query_params|params)\.get\(\s*["'](\w+)["']"""),
    re.compile(r"""(?:GET|POST|query_params|params)\[["'](\w+)["']\]"""),
    # Form and serializer fields.
    re.compile(r"""^\s+(\w+)\s*=\s*(?:forms|serializers)\.\w+\(""", re.M),
]


def parameter_names() -> set[str]:
    names = set()
    for app in APPS:
        for path in (REPO_ROOT / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            text = path.read_text()
            for pattern in READS:
                names.update(pattern.findall(text))
    return names


FORM = "application/x-www-form-urlencoded"


def takes_files(route: Route) -> bool:
    """Whether the view reads uploaded files: a page that reads ``request.FILES``, or an
    API view with parsers of its own (the import's, which take a file). Their forms are
    sent as multipart, as the browser and scripts send them; every other form as a
    browser sends one without a file input (``FORM``), which reaches the same fields
    for a fifth of the parsing."""
    view = route.pattern.callback
    cls = getattr(view, "cls", None) or getattr(view, "view_class", None)
    if cls is not None:
        parsers = getattr(cls, "parser_classes", api_settings.DEFAULT_PARSER_CLASSES)
        return parsers is not api_settings.DEFAULT_PARSER_CLASSES
    return "request.FILES" in inspect.getsource(inspect.unwrap(view))


def test_the_parameter_names_are_found() -> None:
    names = parameter_names()
    assert {"task", "queue", "credit", "part", "project", "annotator", "threshold"} <= names


def test_the_views_that_take_files_are_found() -> None:
    keys = {route.key for route in project_routes() if takes_files(route)}
    assert {"import-new", "api:import-list"} <= keys
    assert "step-label" not in keys and "api:label-list" not in keys


@pytest.mark.parametrize(("role", "blind"), [("admin", False), ("annotator", True)])
def test_junk_parameters_never_cause_a_server_error(role: str, blind: bool, tmp_path: Path) -> None:
    world = build_world(tmp_path, blind=blind)
    visitors = Visitors(world)
    names = sorted(parameter_names())
    errors = []

    def failed(response: Any) -> bool:
        # /readyz answers 503 when ?require= names a queue without workers: its answer.
        return response.status_code >= 500 and not (
            route.key == "readyz" and response.status_code == 503
        )

    # Each value in every name, as a query string and as a form body of either kind:
    # encoded once, not once a route (the long value makes a megabyte of each).
    junk = [
        (
            value,
            "?" + urlencode(dict.fromkeys(names, value)),
            urlencode(dict.fromkeys(names, value)).encode(),
            encode_multipart(BOUNDARY, dict.fromkeys(names, value)),
        )
        for value in JUNK
    ]
    for route in project_routes():
        if route.key in ("api:api-schema", "api:api-docs"):
            continue
        files = takes_files(route)
        for number, (value, query, form, multipart) in enumerate(junk):
            # Pages answer HTMX with their partials: every value reaches one of the two
            # (both, over the five values); the API has no partials.
            htmx = number % 2 == 1 and not route.key.startswith("api:")
            response = visitors.request(route, role, "GET", query=query, htmx=htmx)
            if failed(response):
                errors.append(f"GET {route.path(world)} {value[:20]!r} htmx={htmx}")
            if files:
                response = visitors.request(route, role, "POST", form=multipart)
            else:
                response = visitors.request(route, role, "POST", form=form, form_type=FORM)
            if failed(response):
                errors.append(f"POST {route.path(world)} {value[:20]!r}")
    assert not errors, "server errors:\n" + "\n".join(errors)
