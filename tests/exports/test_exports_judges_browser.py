"""The export form in Chromium with an LLM judge: choosing its critiques for trl-stepwise
shows them in the preview as text (the markup in a critique is never a page element),
and the critique format previews the judge's replies; at a laptop's and a phone's size
the page reads well."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from scoring.models import Scorer
from tests.browser import sign_in
from tests.exports.test_exports_judges import HOSTILE, arith, judge, researcher  # noqa: F401
from tests.screens import UNLABELLED, WIDEST, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_judge_critiques_preview_as_text(
    page: Any,
    live_server: Any,
    tmp_path: Path,
    judge: Scorer,  # noqa: F811
    researcher: Any,  # noqa: F811
    width: int,
    height: int,
) -> None:
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "researcher", PASSWORD)
    page.goto(live_server.url + reverse("export-list", args=["arith"]))

    page.select_option("#id_format", "trl-stepwise")
    page.select_option("#id_labels", "import:stepscope")
    page.select_option("#id_neutral", "drop")
    page.select_option("#id_critiques", "judge")
    page.wait_for_function(
        "() => document.querySelector('#export-preview')?.textContent.includes('critiques')"
    )
    preview = page.inner_text("#export-preview")
    # JSON text of the record: the critique's quotes escaped by JSON, its markup shown.
    assert '<script>alert(\\"critique\\")</script> & <b>bold</b>' in preview
    assert page.locator("#export-preview script, #export-preview b").count() == 0
    page.locator("#export-preview .preview-record >> nth=1").scroll_into_view_if_needed()
    shot(page, f"export-critiques-{width}")

    page.select_option("#id_format", "critique")
    page.wait_for_function(
        "() => document.querySelector('#export-preview .preview-record')"
        "?.textContent.includes('\"completion\"')"
    )
    page.locator("#export-preview").scroll_into_view_if_needed()
    shot(page, f"export-critique-rows-{width}")
    assert page.evaluate(UNLABELLED) == []
    assert page.evaluate(WIDEST, width) == []
    assert HOSTILE  # the fixture's critique is the one checked above
