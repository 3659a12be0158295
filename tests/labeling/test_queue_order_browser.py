"""The queue page of a "most uncertain first" queue, in a real browser: its items are
listed in the order leases hand them out (least certain first), and the page says so; a
plain queue says it goes by position."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from labeling.models import Queue
from labeling.selectors import queues as queue_selectors
from labeling.services import queue_create
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory
from tests.labeling.test_queue_order import head, leased_in_turn, scored
from tests.screens import shot
from trajectories.models import Membership
from trajectories.selection import TrajectoryFilters
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


def listed(page: Any) -> list[int]:
    return page.eval_on_selector_all(
        "#queue-item-rows tr[id^=queue-item-] a",
        "links => links.map(a => Number(a.getAttribute('href').split('/')[2]))",
    )


@pytest.mark.parametrize("viewport", [(1440, 900), (390, 844)])
def test_the_uncertain_queue_lists_items_in_lease_order(
    page: Any, live_server: Any, viewport: tuple[int, int], monkeypatch: Any
) -> None:
    # Two items a page, so that "Load more" pages in the same order.
    monkeypatch.setattr(queue_selectors, "QUEUE_ITEMS_PAGE_SIZE", 2)
    project = project_create(slug="unsure", name="Unsure")
    scorer = head(project, "1")
    sure, unsure, middling, unscored = scored(
        project, scorer, [[0.9, 0.95], [0.1, 0.52], [0.3, 0.8], []]
    )
    lead = UserFactory.create(username="lead")
    MembershipFactory.create(user=lead, project=project, role=Membership.Role.RESEARCHER)
    queue = queue_create(
        project=project,
        name="uncertain",
        created_by=lead,
        filters=TrajectoryFilters(),
        order=Queue.Order.UNCERTAIN,
    )
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "lead", PASSWORD)
    page.goto(live_server.url + reverse("queue-detail", args=[queue.pk]))
    assert "most uncertain first" in page.inner_text("#queue-items-order")
    page.click("#queue-items-more a")
    page.wait_for_function(
        "() => document.querySelectorAll('#queue-item-rows tr[id^=queue-item-]').length === 4"
    )
    shown = listed(page)
    assert shown == [unsure.pk, middling.pk, sure.pk, unscored.pk]
    # The page does not scroll sideways (on a phone the table scrolls in its box).
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    shot(page, f"queue-uncertain-{width}")
    # The order the page shows is the order leases come in.
    takers = [UserFactory.create(username=f"a{n}") for n in range(4)]
    assert leased_in_turn(queue, takers) == shown


def test_a_plain_queue_says_it_goes_by_position(client: Any) -> None:
    project = project_create(slug="plain", name="Plain")
    lead = UserFactory.create(username="lead")
    MembershipFactory.create(user=lead, project=project, role=Membership.Role.RESEARCHER)
    queue = queue_create(
        project=project, name="plain", created_by=lead, filters=TrajectoryFilters()
    )
    client.force_login(lead)
    html = client.get(reverse("queue-detail", args=[queue.pk])).content.decode()
    assert "In the order leases hand them out: by position." in html
