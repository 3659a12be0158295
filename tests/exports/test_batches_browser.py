"""The batch page in Chromium: an empty batch, a batch of one version, and one with a long
name whose two versions diff; choosing other versions swaps the diff in (HTMX). At a
laptop's and a phone's size nothing reaches past the screen's edge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from exports.models import ExportBatch
from tests.browser import sign_in
from tests.exports.test_batches import export_into, label
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.screens import UNLABELLED, WIDEST, shot
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"
LONG = "nightly-rl-batch-for-the-math-prm-with-a-name-long-enough-to-wrap-on-a-phone-0123456789"


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_the_batch_page_at_a_laptops_and_a_phones_size(
    page: Any, live_server: Any, settings: Any, tmp_path: Path, width: int, height: int
) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"
    project = project_create(slug="demo", name="Demo")
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    ExportBatch.objects.create(project=project, name="empty", created_by=user)
    long_id = "rollout-" + "x" * 110
    first = trajectory_with_steps(project, ["a", "b", "c"], external_id=long_id)
    label(first, 0, 1, user)
    export_into(project, user, batch="one")
    export_into(project, user, batch=LONG)
    label(first, 1, -1, user)
    label(first, 0, -1, user)
    trajectory_with_steps(project, ["d"], external_id="added-later")
    export_into(project, user, batch=LONG)

    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "researcher", PASSWORD)

    page.goto(live_server.url + reverse("batch-detail", args=["demo", "empty"]))
    assert "No versions yet" in page.inner_text("#batch-empty")
    # "New version" opens the export form with the batch filled in.
    assert page.get_attribute("#batch-new-version", "href").endswith("/exports/?batch=empty")
    shot(page, f"batch-empty-{width}")
    assert page.evaluate(WIDEST, width) == []

    page.goto(live_server.url + reverse("batch-detail", args=["demo", "one"]))
    assert page.locator("#batch-versions tbody tr").count() == 1
    assert page.locator("#batch-diff").count() == 0  # one version: nothing to compare
    shot(page, f"batch-one-{width}")
    assert page.evaluate(WIDEST, width) == []

    page.goto(live_server.url + reverse("batch-detail", args=["demo", LONG]))
    assert page.locator("#batch-versions tbody tr").count() == 2
    assert "@1 → @2" in page.inner_text("#batch-diff h3 >> nth=0")
    assert page.locator("#diff-trajectories .diff-added").count() == 1
    assert page.locator("#diff-labels tbody tr").count() == 2
    shot(page, f"batch-diff-{width}")
    assert page.evaluate(UNLABELLED) == []
    assert page.evaluate(WIDEST, width) == []

    # Turned round: the diff region is swapped in, the address follows.
    page.select_option("select[name=from]", "2")
    page.select_option("select[name=to]", "1")
    page.wait_for_function(
        "() => document.querySelector('#batch-diff h3')?.textContent.includes('@2 → @1')"
    )
    assert page.locator("#diff-trajectories .diff-removed").count() == 1
    assert "from=2" in page.url and "to=1" in page.url
    page.locator("#batch-diff").scroll_into_view_if_needed()
    shot(page, f"batch-diff-turned-{width}")
    assert page.evaluate(WIDEST, width) == []

    page.goto(live_server.url + reverse("batch-list", args=["demo"]))
    assert page.locator("#batches tbody tr").count() == 3
    shot(page, f"batch-list-{width}")
    assert page.evaluate(WIDEST, width) == []
