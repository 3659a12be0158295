"""What browser tests share: signing in.

``sign_in_by_form`` signs in through the login page, as a person does; the accounts
flow (tests/accounts/test_browser.py) keeps the login page tried in a real browser.
The other browser tests sign in as Django's test client does (``force_login``) and
give the browser the session cookie: the login page, its POST and the page it
redirects to cost each of ~50 tests three requests that were not what it tested."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse


def sign_in_by_form(page: Any, live_server: Any, username: str, password: str) -> None:
    page.goto(live_server.url + reverse("login"))
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login" not in url)


def sign_in(page: Any, live_server: Any, username: str, password: str) -> None:
    user = User.objects.get(username=username)
    assert user.check_password(password), f"{username}'s password is not {password!r}"
    client = Client()
    client.force_login(user)
    session = client.cookies[settings.SESSION_COOKIE_NAME]
    page.context.add_cookies(
        [{"name": session.key, "value": session.value, "url": live_server.url}]
    )
