"""What browser tests share: signing in through the login page, as a person does."""

from __future__ import annotations

from typing import Any

from django.urls import reverse


def sign_in(page: Any, live_server: Any, username: str, password: str) -> None:
    page.goto(live_server.url + reverse("login"))
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
