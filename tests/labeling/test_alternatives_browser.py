"""A PRM800K path with alternative completions in Chromium, at a laptop's and a phone's
size: the step they branch from is marked, and its link opens the alternative at the
step it takes its own."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from django.urls import reverse

from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory
from tests.labeling.test_alternatives import PHASE2
from tests.screens import UNLABELLED, WIDEST, shot
from trajectories.models import Membership, Step, Trajectory
from trajectories.services import project_create, trajectory_import

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_a_path_marks_and_links_its_alternatives(
    page: Any, live_server: Any, width: int, height: int
) -> None:
    project = project_create(slug="prm", name="PRM800K")
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    trajectory_import(project=project, source_format="prm800k", path=PHASE2)
    children = Trajectory.objects.filter(project=project, parent__isnull=False)
    parent = Counter(children.values_list("parent_id", flat=True)).most_common(1)[0][0]
    child = children.filter(parent_id=parent).order_by("pk").first()
    assert child is not None and child.branch_index is not None
    main = Trajectory.objects.get(pk=parent)
    step = Step.objects.get(trajectory=main, index=min(child.branch_index, main.step_count - 1))

    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "researcher", "pw-for-tests")
    page.goto(live_server.url + reverse("trajectory-detail", args=[main.pk]))
    mark = page.locator(f"#alternatives-{step.pk}")
    mark.scroll_into_view_if_needed()
    assert "alternative" in mark.inner_text()
    shot(page, f"alternatives-{width}")
    assert page.locator("h1").count() == 1
    assert page.evaluate(UNLABELLED) == []
    assert page.evaluate(WIDEST, width) == []

    with page.expect_navigation():
        mark.locator(f'a[href^="/t/{child.pk}/steps/"]').click()
    own = Step.objects.get(trajectory=child, index=child.branch_index)
    page.wait_for_selector(f"#step-{own.pk}")
    assert f"/t/{child.pk}/" in page.url
