"""The rules and webhooks pages in a real browser, on a laptop and a phone: the empty
states, a webhook made through the form (its secret shown once), a rule with a long name
made from the list's query string and turned off and on in place (HTMX), the rule's page
after a backfill. Nothing reaches past the screen's edge; every control has a name."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from automation.models import Rule, Webhook
from automation.services import rule_backfill
from labeling.services import queue_create
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.screens import UNLABELLED, WIDEST, shot
from trajectories.models import Membership
from trajectories.selection import selection_parse
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"
LONG = "label-every-failed-grpo-rollout-of-qwen2.5-math-7b-instruct-with-a-long-name"


def _fits(page: Any, width: int) -> None:
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width
    assert page.evaluate(WIDEST.replace("body *", "body *:not(.table-scroll *)"), width) == []
    assert page.evaluate(UNLABELLED) == []


@pytest.mark.parametrize("viewport", [(1440, 900), (390, 844)])
def test_an_admin_makes_a_webhook_and_a_rule_in_the_pages(
    page: Any, live_server: Any, viewport: tuple[int, int], settings: Any
) -> None:
    settings.STEPSCOPE_WEBHOOK_ALLOW_PRIVATE = True
    project = project_create(slug="rl", name="RL")
    user = UserFactory.create(username="boss")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.ADMIN)
    for n in range(3):
        trajectory_with_steps(project, [f"step {n}"], success=n == 0, external_id=f"{LONG}-{n}")
    queue = queue_create(
        project=project, name="failures", created_by=user, filters=selection_parse({"task": "-"})
    )
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "boss", PASSWORD)

    page.goto(live_server.url + reverse("project-settings", args=[project.slug]))
    page.click("#webhooks-link")
    assert page.locator("#no-webhooks").is_visible()
    _fits(page, width)
    shot(page, f"webhooks-empty-{width}")
    page.fill("#id_name", f"trainer {LONG}")
    page.fill("#id_url", "http://127.0.0.1:9/a/rather/long/path/for/the/trainer/hook")
    page.check("input[value='rule.fired']")
    page.click("#webhook-form button[type=submit]")
    secret = page.inner_text("#webhook-secret")
    assert secret == Webhook.objects.get().secret
    _fits(page, width)
    shot(page, f"webhooks-created-{width}")

    page.goto(live_server.url + reverse("rule-list", args=[project.slug]))
    assert page.locator("#no-rules").is_visible()
    _fits(page, width)
    shot(page, f"rules-empty-{width}")
    page.fill("#id_name", LONG)
    page.fill("#id_selection", "outcome=failure&bogus=1")
    page.select_option("#id_action", "queue")
    page.select_option("#id_queue", str(queue.pk))
    page.click("#rule-form button[type=submit]")
    assert "bogus: unknown filter" in page.inner_text("#selection-error")
    page.fill("#id_selection", "outcome=failure")
    page.click("#rule-form button[type=submit]")
    page.wait_for_selector("#no-firings")
    rule = Rule.objects.get()
    rule_backfill(rule_id=rule.pk)  # what the backfill button queues for a worker
    page.reload()
    assert page.locator("#firings tbody tr").count() == 2
    _fits(page, width)
    shot(page, f"rule-detail-{width}")

    page.goto(live_server.url + reverse("rule-list", args=[project.slug]))
    page.click(f"#rule-toggle-{rule.pk}")
    page.wait_for_selector(f"#rule-{rule.pk} >> text=Turn on")
    rule.refresh_from_db()
    assert rule.active is False
    _fits(page, width)
    shot(page, f"rules-{width}")
