"""The tokens page in Chromium: make a token (the form swaps in with the secret shown
once), at a desktop and a phone width, then revoke it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from accounts.models import ApiToken
from tests.browser import sign_in_by_form
from tests.factories import UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


@pytest.mark.parametrize("size", [(1440, 900), (390, 844)], ids=["desktop", "phone"])
def test_make_and_revoke_a_token_in_the_browser(
    page: Any, live_server: Any, tmp_path: Path, size: tuple[int, int]
) -> None:
    UserFactory.create(username="ann")
    page.set_viewport_size({"width": size[0], "height": size[1]})
    sign_in_by_form(page, live_server, "ann", PASSWORD)
    page.click("header >> text=API tokens")
    page.wait_for_selector("#token-form")
    # A long name without a space: the row still fits a phone, its button in view.
    name = "training-job-" + "x" * 80
    page.fill("#token-form input[name=name]", name)
    page.fill("#token-form input[name=expires_in_days]", "30")
    page.click("#token-form button[type=submit]")
    secret = page.text_content("#token-secret .token-value", timeout=10_000)
    token = ApiToken.objects.get(name=name)
    assert secret is not None and secret.startswith(token.token_key)
    assert page.is_visible(f"#token-{token.token_key}")
    button = page.locator(f"#token-{token.token_key} button").bounding_box()
    assert button is not None and button["x"] + button["width"] <= size[0]
    page.screenshot(path=str(tmp_path / f"tokens-{size[0]}x{size[1]}.png"), full_page=True)

    page.click(f"#token-{token.token_key} button")
    page.wait_for_selector(f"text=Token '{name}' revoked")
    assert not ApiToken.objects.exists()
    assert page.locator("#token-secret").count() == 0
