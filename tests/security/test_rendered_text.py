"""What a person reads on a page: no template syntax left in it, and our own error pages.

Every page and partial of the security tests' world is rendered for every role, plain
and as HTMX, over data with no braces in it, and the text a browser would show (tag
attributes and script bodies aside) must hold none of Django's template delimiters: a
comment Django does not recognise (``{# … #}`` over two lines), a tag or a variable
misspelt or unclosed, shows up there as source. The plain pages are checked on the
answers test_authorization.py's walk already gets (the same GET of every route by every
role); this file's walk asks for the partials."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, RequestFactory
from django.views.defaults import server_error

from tests.security.world import ROLES, Route, Visitors, body, build_world, project_routes

pytestmark = pytest.mark.django_db

DELIMITERS = ("{#", "#}", "{%", "%}", "{{", "}}")


class _Text(HTMLParser):
    """The page's text: what lies between tags, outside script and style elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self._hidden += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def shown_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    return " ".join(parser.parts)


def leftovers(text: str) -> list[str]:
    found = []
    for delimiter in DELIMITERS:
        at = text.find(delimiter)
        if at >= 0:
            found.append(repr(text[max(0, at - 40) : at + 40]))
    return found


def renders_pages(route: Route) -> bool:
    """The pages and partials, and the API's two HTML pages."""
    return not route.is_api or route.key in ("api:api-docs", "api:api-root")


def template_leftovers(response: Any) -> list[str] | None:
    """Template syntax on the page in ``response``, or ``None`` where it holds no page
    (JSON, a file)."""
    if not response["Content-Type"].startswith("text/html"):
        return None
    return leftovers(shown_text(body(response)))


def test_the_check_sees_a_comment_django_does_not_recognise() -> None:
    html = "<body>{# one\nline too many #}<h1>Title</h1><script>x = {a: 1}</script></body>"
    assert leftovers(shown_text(html)) != []
    assert leftovers(shown_text("<body><h1>Title</h1><script>x = {{}}</script></body>")) == []


def test_no_partial_shows_template_syntax(tmp_path: Path) -> None:
    """Every page's HTMX answer, for every role (test_authorization.py checks the plain
    pages on its walk)."""
    world = build_world(tmp_path, text="Plain words")
    visitors = Visitors(world)
    bad = []
    rendered = 0
    for route in filter(renders_pages, project_routes()):
        for role in ROLES:
            found = template_leftovers(visitors.request(route, role, "GET", htmx=True))
            if found is None:
                continue
            rendered += 1
            bad += [f"{route.path(world)} as {role} (htmx): {text}" for text in found]
    assert rendered > 200
    assert not bad, "template syntax on the page:\n" + "\n".join(bad)


@pytest.mark.urls("tests.security.refusal_urls")
def test_a_refusal_says_why_on_our_own_page(client: Client) -> None:
    """A PermissionDenied's message is the reason the 403 page gives, in the site's
    layout, not Django's bare '403 Forbidden'."""
    client.force_login(User.objects.create_user("viewer", password="x"))
    response = client.get("/test-refusal/")
    assert response.status_code == 403
    html = body(response)
    assert "<h1>Not allowed</h1>" in html
    assert "Only researchers and admins export data." in html
    assert 'class="topbar"' in html, "the 403 page has the site's header"


def test_an_outsider_gets_our_404_page(client: Client) -> None:
    client.force_login(User.objects.create_user("stranger", password="x"))
    response = client.get("/p/no-such-project/")
    assert response.status_code == 404
    html = body(response)
    assert "<h1>Not found</h1>" in html
    assert "/p/no-such-project/" in html
    assert "Traceback" not in html and "URLconf" not in html


def test_the_500_page_renders_without_any_context() -> None:
    response = server_error(RequestFactory().get("/anything/"))
    assert response.status_code == 500
    html = response.content.decode()
    assert "Something went wrong on our side" in html
    assert leftovers(shown_text(html)) == []
