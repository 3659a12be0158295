"""The export form in Chromium: choosing a format, a label source and the neutral mapping
updates the preview (HTMX) with the selection's counts and the first records, before
anything runs; at a laptop's and a phone's size the page reads well."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from exports.models import ExportJob
from tests.browser import sign_in
from tests.exports.test_exports import PROCESSBENCH
from tests.factories import MembershipFactory, UserFactory
from tests.screens import UNLABELLED, WIDEST, shot
from trajectories.models import Membership, Step
from trajectories.services import project_create, trajectory_import

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_choosing_an_export_shows_its_preview(
    page: Any, live_server: Any, width: int, height: int
) -> None:
    project = project_create(slug="pb", name="ProcessBench")
    trajectory_import(project=project, source_format="processbench", path=PROCESSBENCH)
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "researcher", PASSWORD)
    page.goto(live_server.url + reverse("export-list", args=["pb"]))

    # Before the neutral mapping is chosen, the preview says what it still needs.
    page.wait_for_selector("#export-preview .errors-summary")
    page.select_option("#id_format", "trl-stepwise")
    page.select_option("#id_labels", "import:processbench")
    page.select_option("#id_neutral", "drop")
    page.wait_for_selector("#export-preview .preview-record")
    steps = Step.objects.filter(trajectory__project=project).count()
    assert f"{steps}\nsteps" in page.inner_text("#export-preview .stats")
    first = page.inner_text("#export-preview .preview-record >> nth=0")
    assert '"completions"' in first and '"labels"' in first

    # Another format: the preview follows.
    page.select_option("#id_format", "processbench")
    page.select_option("#id_neutral", "keep")
    page.wait_for_function(
        "() => document.querySelector('#export-preview .preview-record')"
        "?.textContent.includes('\"problem\"')"
    )
    assert ExportJob.objects.count() == 0, "a preview starts no export"
    # The format's answer can show before the neutral mapping's, whose swap would then
    # replace the preview under the scroll below: wait until htmx has none in flight.
    page.wait_for_function("() => !document.querySelector('.htmx-request')")

    shot(page, f"export-form-{width}")
    page.locator("#export-preview").scroll_into_view_if_needed()
    shot(page, f"export-preview-{width}")
    assert page.locator("h1").count() == 1
    assert page.evaluate(UNLABELLED) == []
    assert page.evaluate(WIDEST, width) == []
