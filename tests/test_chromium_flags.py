"""The browser tests' Chromium flags (tests/conftest.py): one --disable-features
replaces another, so ours must repeat every feature Playwright itself disables, and the
omnibox popup, which each window rendered in a process of its own, stays off."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import playwright
import pytest

from tests.conftest import CHROMIUM_DISABLED_FEATURES, PLAYWRIGHT_DISABLED_FEATURES


def playwright_disabled_features() -> set[str]:
    """The features the installed Playwright disables, read from its driver's source."""
    driver = Path(playwright.__file__).parent / "driver" / "package" / "lib"
    for path in sorted(driver.rglob("*.js")):
        text = path.read_text(errors="replace")
        found = re.search(r"disabledFeatures = \[(.*?)\]", text, re.S)
        if found:
            return set(re.findall(r'"(\w+)"', found.group(1)))
    raise AssertionError(f"no disabledFeatures list in {driver}")


def test_our_list_repeats_playwrights() -> None:
    assert playwright_disabled_features() == set(PLAYWRIGHT_DISABLED_FEATURES)


@pytest.mark.browser
def test_no_window_renders_an_omnibox_popup(chromium: object) -> None:
    assert shutil.which("chromium")
    assert "WebUIOmniboxPopup" in CHROMIUM_DISABLED_FEATURES
    context = chromium.new_context()  # type: ignore[attr-defined]
    try:
        context.new_page().goto("about:blank")
        session = chromium.new_browser_cdp_session()  # type: ignore[attr-defined]
        targets = session.send("Target.getTargets")["targetInfos"]
    finally:
        context.close()
    assert [t["url"] for t in targets if t["type"] == "page"] == ["about:blank"]
    assert not [t["url"] for t in targets if "omnibox" in t["url"]]
