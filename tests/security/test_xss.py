"""An XSS corpus in everything a file or a user controls: step contents, tool-call
arguments and outputs, task text, metadata, rationales and corrections, guidelines
(markdown, with raw HTML in it), import file names and error messages, queue, scorer
and policy names. Every page of the project is rendered:

- in process, as an admin and an annotator, plain and as HTMX: no response holds the
  payloads' markup unescaped, nor a ``javascript:`` URL in a link;
- in the real browser, with the Content-Security-Policy switched off so that only our
  escaping stands between a payload and a running script: no dialog opens, no payload
  sets its flag, no page error, and the payload shows as text where the page shows the
  field."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from labeling.models import StepLabel
from tests.security.world import (
    Route,
    Visitors,
    World,
    body,
    build_world,
    project_routes,
    route_query,
)
from trajectories.models import ImportBatch, Project, Step, Trajectory

# Short enough for every name field (a scorer's name is at most 100 characters).
SHORT = '<img src=x onerror=alert(1)>"><svg onload=alert(2)><script>alert(3)</script>{{7*7}}'
# For the long text fields: links, SVG, markdown with raw HTML, template-looking text.
LONG = "\n\n".join(
    [
        SHORT,
        '<a href="javascript:window.__xss=1">click me</a>',
        "[a markdown link](javascript:window.__xss=2) and ![img](javascript:window.__xss=3)",
        "<svg><script>window.__xss=4</script></svg>",
        '<svg xmlns="http://www.w3.org/2000/svg"><animate onbegin="window.__xss=5"/></svg>',
        '<iframe src="javascript:window.__xss=6"></iframe>',
        "<details open ontoggle=window.__xss=7>",
        "{% now 'Y' %} {{ request.user }}",
        "<div>raw *markdown* with <b onmouseover=window.__xss=8>html</b></div>",
    ]
)


class _Elements(HTMLParser):
    """The elements a browser would build from a page, as far as a payload could use
    them: event-handler attributes, ``javascript:`` URLs, scripts that run a payload
    and frames (no page of ours has any of them)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in_script = tag == "script"
        if tag in ("iframe", "frame", "object", "embed"):
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            value = (value or "").strip().lower()
            if name.startswith("on"):
                self.found.append(f"<{tag} {name}=...>")
            if name in URL_ATTRIBUTES and re.sub(r"\s", "", value).startswith("javascript:"):
                self.found.append(f"<{tag} {name}={value!r}>")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and ("alert(" in data or "__xss" in data):
            self.found.append(f"<script>{data[:40]}")


URL_ATTRIBUTES = {"href", "src", "action", "formaction", "xlink:href", "data", "srcdoc"}


def unescaped(html: str) -> list[str]:
    parser = _Elements()
    parser.feed(html)
    parser.close()
    return parser.found


def xss_world(tmp_path: Path) -> World:
    world = build_world(tmp_path, text=SHORT)
    Project.objects.filter(pk=world.project.pk).update(guidelines=f"# Guidelines\n\n{LONG}")
    Trajectory.objects.filter(project=world.project).update(task=LONG, metadata={"note": LONG})
    for step in Step.objects.filter(trajectory__project=world.project):
        step.content = f"{step.content}\n\n{LONG}"
        if step.tool_args is not None:
            step.tool_args = {"query": LONG, "html": SHORT}
        step.save(update_fields=["content", "tool_args"])
    StepLabel.objects.filter(pk=world.label.pk).update(
        rationale=f"rationale {LONG}", correction=f"correction {LONG}"
    )
    ImportBatch.objects.filter(pk=world.import_batch.pk).update(
        errors=[{"location": "line 3", "field": f"steps.0.{SHORT}", "message": LONG}]
    )
    return world


def _pages(visitors: Visitors, role: str) -> list[Route]:
    """The project's pages ``role`` can open (GET, 200): what the browser visits."""
    return [
        route
        for route in project_routes()
        if not route.is_api
        and route.key not in ("healthz", "readyz", "export-download")
        and visitors.request(route, role, "GET").status_code == 200
    ]


# --- In process ----------------------------------------------------------------------------


def test_the_scan_finds_markup_that_came_through() -> None:
    assert unescaped('<p>&lt;img src=x onerror=alert(1)&gt; href="javascript:x"</p>') == []
    assert unescaped('<img src=x onerror="alert(1)">') == ["<img onerror=...>"]
    assert unescaped('<a href=" JavaScript:alert(1)">x</a>') != []
    assert unescaped("<svg><script>window.__xss=4</script></svg>") != []


@pytest.mark.django_db
def test_no_page_or_partial_holds_the_payloads_unescaped(tmp_path: Path) -> None:
    world = xss_world(tmp_path)
    visitors = Visitors(world)
    bad = []
    rendered = 0
    for route in project_routes():
        for role in ("admin", "annotator"):
            # The API has no partials: it answers HTMX as it answers anyone.
            for htmx in (False,) if route.is_api else (False, True):
                response = visitors.request(route, role, "GET", htmx=htmx)
                if response.status_code != 200:
                    continue
                rendered += 1
                if route.is_api:
                    # JSON is never sniffed into HTML.
                    kind = response["Content-Type"]
                    assert not kind.startswith("text/html") or route.key in (
                        "api:api-docs",
                        "api:api-root",
                    ), f"{route.path(world)} answers {kind}"
                    if not kind.startswith("text/html"):
                        continue
                html = body(response)
                where = f"{route.path(world)} as {role}{' (htmx)' if htmx else ''}"
                bad += [f"{where}: {element}" for element in unescaped(html)]
    assert rendered > 100
    assert not bad, "unescaped payloads:\n" + "\n".join(bad)


# --- In the browser ------------------------------------------------------------------------

# Pages that show the payload-carrying fields: each must show the payload as text.
SHOWN = {
    "project-home",
    "trajectory-list",
    "task-tree",
    "trajectory-detail",
    "rollout-diff",
    "step-content",
    "step-label",
    "step-history",
    "guidelines",
    "import-detail",
    "export-list",
    "export-detail",
    "queue-list",
    "queue-detail",
    "review-trajectory",
    "scoring-section",
    "rollouts-section",
    "step-rollouts",
    "trajectory-evidence",
}


# Review is for researchers and admins.
REFUSED = {"admin": set(), "annotator": {"review-trajectory"}}


# Pages load side by side, this many at a time. Each is read once the network has been
# quiet for half a second (HTMX's ``load`` partials come after the page): one page after
# another, those quiet half-seconds were most of this test's time.
SIDE_BY_SIDE = 6


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_no_payload_runs_in_the_browser_and_each_shows_as_text(
    page: Any, live_server: Any, tmp_path: Path
) -> None:
    """As an admin and as an annotator, in one world (building it is most of a role's
    setup)."""
    world = xss_world(tmp_path)
    visitors = Visitors(world)
    for role in ("admin", "annotator"):
        _no_payload_runs_as(role, world, visitors, page.context.browser, live_server.url)


def _no_payload_runs_as(
    role: str, world: World, visitors: Visitors, browser: Any, base_url: str
) -> None:
    session = visitors.clients[role].cookies[settings.SESSION_COOKIE_NAME].value
    # Without the CSP, only escaping keeps a payload from running.
    context = browser.new_context(bypass_csp=True)
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": base_url}])
    dialogs: list[str] = []
    errors: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    tabs = []
    for _ in range(SIDE_BY_SIDE):
        tab = context.new_page()
        tab.set_default_timeout(15_000)
        tab.on("dialog", on_dialog)
        tab.on("pageerror", lambda error: errors.append(str(error)))
        tabs.append(tab)
    problems = []
    visited = set()
    pages = _pages(visitors, role)
    for first in range(0, len(pages), SIDE_BY_SIDE):
        opened = []
        for route, tab in zip(pages[first : first + SIDE_BY_SIDE], tabs, strict=False):
            url = base_url + route.path(world) + route_query(route, world)
            # Only the answer here; the tab goes on loading while the next one opens.
            opened.append((route, url, tab, tab.goto(url, wait_until="commit")))
        for route, url, tab, response in opened:
            tab.wait_for_load_state("networkidle")
            assert response is not None and response.status == 200, url
            visited.add(route.key)
            flag = tab.evaluate("window.__xss")
            if flag is not None:
                problems.append(f"{url}: a payload set window.__xss = {flag}")
            if route.key in SHOWN:
                text = tab.inner_text("body")
                for shown in (
                    "<img src=x onerror=alert(1)>",
                    "<script>alert(3)</script>",
                    "{{7*7}}",
                ):
                    if shown not in text:
                        problems.append(f"{url}: {shown!r} is not shown as text")
    context.close()

    expected = SHOWN - REFUSED[role]
    assert visited >= expected, f"pages not rendered as {role}: {expected - visited}"
    assert not dialogs, f"payloads opened dialogs as {role}: {dialogs}"
    assert not errors, f"page errors as {role}: {errors}"
    assert not problems, f"as {role}:\n" + "\n".join(problems)
