"""Rules and webhooks from the client, against a live server and the suite's worker: a
rule made and backfilled fills a queue with the failures already there, an unknown filter
is refused naming it, a webhook's secret comes once, and its deliveries are read back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from stepscope_client import Client, StepscopeError

from automation.models import RuleFiring
from labeling.models import QueueItem
from labeling.services import queue_create
from stepscope.events import event_emit
from tests.waiting import wait_until
from trajectories.models import Project
from trajectories.selection import TrajectoryFilters

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def stepscope(live_server: Any, token: str) -> Iterator[Client]:
    with Client(live_server.url, token) as stepscope:
        yield stepscope


def records() -> list[dict[str, Any]]:
    return [
        {
            "id": f"run-{n}",
            "task": f"Task {n}",
            "outcome": {"success": n % 2 == 0},
            "steps": [{"content": f"{n}: first"}, {"content": f"{n}: second"}],
        }
        for n in range(4)
    ]


def test_a_rule_made_and_backfilled_fills_a_queue_with_the_failures(
    stepscope: Client, project: Project, owner: User, celery_worker: object
) -> None:
    # Made empty, before the trajectories: the rule is what fills it.
    queue = queue_create(
        project=project, name="failures", created_by=owner, filters=TrajectoryFilters()
    )
    stepscope.push_trajectories(project.slug, records())
    with pytest.raises(StepscopeError) as refused:
        stepscope.create_rule(project.slug, "bad", "queue", selection={"outcom": "failure"})
    assert refused.value.status == 400 and "outcom" in str(refused.value.errors)
    rule = stepscope.create_rule(
        project.slug,
        "failures to review",
        "queue",
        selection={"outcome": "failure"},
        queue=queue.pk,
    )
    assert [r["id"] for r in stepscope.rules(project.slug)] == [rule["id"]]
    stepscope.rule_backfill(rule["id"])
    assert wait_until(lambda: RuleFiring.objects.filter(rule_id=rule["id"]).count() == 2, 60)
    fired = stepscope.rule_firings(rule["id"])
    assert {f["trigger"] for f in fired} == {"backfill"} and len(fired) == 2
    assert QueueItem.objects.filter(queue=queue).count() == 2
    assert stepscope.rule_set_active(rule["id"], False)["active"] is False


def test_a_webhook_s_secret_comes_once_and_its_deliveries_are_read(
    stepscope: Client, project: Project, settings: Any
) -> None:
    settings.STEPSCOPE_WEBHOOK_ALLOW_PRIVATE = True
    made = stepscope.create_webhook(
        project.slug, "trainer", "http://127.0.0.1:9/hook", ["batch.version"]
    )
    assert made["secret"]
    (listed,) = stepscope.webhooks(project.slug)
    assert "secret" not in listed and listed["events"] == ["batch.version"]
    event_emit(project_id=project.pk, kind="batch.version", data={"pin": "rl-batch@1"})
    (delivery,) = stepscope.webhook_deliveries(made["id"])
    assert delivery["kind"] == "batch.version"
    with pytest.raises(StepscopeError) as missing:
        stepscope.redeliver(delivery["id"] + 1000)
    assert missing.value.status == 404
