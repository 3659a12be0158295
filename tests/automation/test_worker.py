"""Rules and webhooks with a real Celery worker, a live server and a real receiver: a rule
fills a queue from live traces as they arrive and grow, another starts a judge run on the
failures of a push without a click, and the webhook's receiver gets the events signed as
a Standard Webhooks library verifies. Deliveries survive the receiver being down and a
worker killed in the middle of a POST: no event lost, none under two ids."""

from __future__ import annotations

import json
import os
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from django.test import Client
from opentelemetry.trace import Status, StatusCode
from standardwebhooks import Webhook as StandardWebhook

from accounts.services import api_token_create
from automation import services
from automation.models import Rule, RuleFiring, WebhookDelivery
from labeling.services import queue_create
from scoring.models import ScoringRun
from scoring.services import judge_create
from stepscope.events import event_emit
from tests.automation.conftest import Receiver
from tests.conftest import WORKER_SETTINGS, celery_worker_log
from tests.scoring.conftest import Workers
from tests.trajectories.test_otlp_clients import provider_for
from tests.waiting import wait_until
from trajectories.models import Project, Trajectory
from trajectories.selection import TrajectoryFilters, selection_parse

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


def _verified(receiver: Receiver, secret: str) -> list[dict[str, Any]]:
    """Every body the receiver got, each checked against its signature."""
    verifier = StandardWebhook(secret)
    return [verifier.verify(item.body, item.headers) for item in receiver.received]


def test_a_rule_fills_a_queue_from_live_traces_as_they_arrive_and_grow(
    project: Project, owner: User, researcher: User, live_server: Any, celery_worker: object
) -> None:
    nothing = selection_parse({"task": "no-such-task"})
    every_trace = queue_create(project=project, name="live", created_by=owner, filters=nothing)
    long_ones = queue_create(project=project, name="long", created_by=owner, filters=nothing)
    services.rule_create(
        project=project,
        name="every trace",
        filters=TrajectoryFilters(),
        action=Rule.Action.QUEUE,
        queue=every_trace,
        user=owner,
    )
    services.rule_create(
        project=project,
        name="three steps or more",
        filters=selection_parse({"min_steps": 3}),
        action=Rule.Action.QUEUE,
        queue=long_ones,
        user=owner,
    )
    _, token = api_token_create(user=researcher, name="exporter")
    provider, _ = provider_for(live_server.url, token, project.slug)
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span(
        "agent", attributes={"openinference.span.kind": "AGENT", "input.value": "Sum 2 and 3"}
    ):
        with tracer.start_as_current_span(
            "ChatCompletion",
            attributes={
                "openinference.span.kind": "LLM",
                "llm.model_name": "gpt-test",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": "I will add them.",
            },
        ):
            pass
        provider.force_flush()
        # The first piece is a trajectory of one step: the first rule takes it, the
        # second does not (yet).
        assert wait_until(lambda: every_trace.items.exists(), 60), celery_worker_log()
        assert not long_ones.items.exists()
        with tracer.start_as_current_span(
            "add", attributes={"openinference.span.kind": "TOOL", "tool.name": "add"}
        ) as tool:
            tool.set_status(Status(StatusCode.ERROR, "TypeError: bad operand"))
    provider.force_flush()
    provider.shutdown()
    # Grown to three steps: the second rule takes it now; the first does not again.
    assert wait_until(lambda: long_ones.items.exists(), 60), celery_worker_log()
    trajectory = Trajectory.objects.get(project=project)
    assert trajectory.step_count == 3
    assert list(every_trace.items.values_list("trajectory_id", flat=True)) == [trajectory.pk]
    assert list(long_ones.items.values_list("trajectory_id", flat=True)) == [trajectory.pk]
    firings = RuleFiring.objects.filter(trajectory=trajectory)
    assert sorted(f.rule.name for f in firings) == ["every trace", "three steps or more"]
    assert {f.source for f in firings} == {"live"}


def test_a_push_starts_a_judge_run_on_its_failures_and_the_webhook_hears_of_it(
    project: Project,
    owner: User,
    researcher: User,
    celery_worker: object,
    receiver: Receiver,
    allow_loopback: None,
) -> None:
    # Nothing listens on the judge's queue: the test is about the run being started.
    judge = judge_create(
        project=project,
        name="judge",
        model_ref="tiny-judge",
        parameters={"mode": "per-step"},
        queue=f"nobody-{uuid.uuid4().hex[:6]}",
    )
    webhook, secret = services.webhook_create(
        project=project,
        name="trainer",
        url=receiver.url,
        events=["import.done", "rule.fired"],
        user=owner,
    )
    rule = services.rule_create(
        project=project,
        name="judge the failures",
        filters=selection_parse({"outcome": "failure"}),
        action=Rule.Action.SCORE,
        scorer=judge,
        user=owner,
    )
    records = [
        {
            "id": f"r{n}",
            "task": f"task {n}",
            "outcome": {"success": n % 3 != 0},
            "steps": [{"content": f"step {n}.{i}"} for i in range(3)],
        }
        for n in range(6)
    ]
    client = Client(HTTP_AUTHORIZATION=f"Token {api_token_create(user=researcher, name='t')[1]}")
    pushed = client.post(
        "/api/v1/imports/",
        json.dumps({"project": project.slug, "trajectories": records}),
        content_type="application/json",
    )
    assert pushed.status_code == 201, pushed.content
    failures = sorted(
        Trajectory.objects.filter(project=project, success=False).values_list("pk", flat=True)
    )
    assert len(failures) == 2

    def started() -> bool:
        return ScoringRun.objects.filter(scorer=judge).exists()

    assert wait_until(started, 60), celery_worker_log()
    run = ScoringRun.objects.get(scorer=judge)
    assert run.selection["trajectory_ids"] == failures
    assert run.created_by is None  # no click: the rule started it
    assert sorted(RuleFiring.objects.filter(rule=rule).values_list("trajectory", flat=True)) == (
        failures
    )
    assert wait_until(lambda: len(receiver.received) >= 2, 60), celery_worker_log()
    events = {event["type"]: event for event in _verified(receiver, secret)}
    assert events["import.done"]["data"]["created"] == 6
    assert events["rule.fired"]["data"]["trajectories"] == failures
    assert events["rule.fired"]["data"]["result"] == {
        "scoring_run": run.pk,
        "scorer": "judge",
    }
    assert all(event["project"]["slug"] == project.slug for event in events.values())
    delivered = WebhookDelivery.objects.filter(webhook=webhook)

    def states() -> set[str]:
        # A fresh query each time (a QuerySet keeps what it read once).
        return set(delivered.all().values_list("status", flat=True))

    # The receiver has the requests before the worker records their answers.
    assert wait_until(lambda: states() == {"delivered"}, 60), states()
    assert set(delivered.all().values_list("last_code", flat=True)) == {204}


def _emit(project: Project, count: int) -> None:
    for n in range(count):
        with transaction.atomic():
            event_emit(project_id=project.pk, kind="export.ready", data={"export": n})


def _ids_by_event(receiver: Receiver) -> dict[str, set[str]]:
    ids: dict[str, set[str]] = defaultdict(set)
    for item in receiver.received:
        ids[json.loads(item.body)["event_id"]].add(item.headers["webhook-id"])
    return ids


def test_a_receiver_down_for_a_while_gets_every_event_once_back_up(
    project: Project,
    owner: User,
    celery_worker: object,
    down_receiver: Receiver,
    allow_loopback: None,
) -> None:
    webhook, secret = services.webhook_create(
        project=project, name="down", url=down_receiver.url, events=["export.ready"], user=owner
    )
    _emit(project, 4)
    deliveries = WebhookDelivery.objects.filter(webhook=webhook)

    def retried() -> bool:
        return all(d.attempts >= 2 for d in deliveries.all())

    assert wait_until(retried, 30), celery_worker_log()
    assert {d.status for d in deliveries.all()} == {"pending"}
    down_receiver.start()
    assert wait_until(lambda: all(d.status == "delivered" for d in deliveries.all()), 30), (
        celery_worker_log()
    )
    _verified(down_receiver, secret)
    ids = _ids_by_event(down_receiver)
    assert len(ids) == 4 and all(len(one) == 1 for one in ids.values())
    for delivery in deliveries.all():
        codes = [attempt["code"] for attempt in delivery.log]
        assert codes[-1] == 204 and set(codes[:-1]) == {None}
        assert "ConnectError" in delivery.log[0]["error"]


@pytest.fixture
def kill_workers(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Iterator[Workers]:
    """Workers this test may kill, sending deliveries on a queue of their own."""
    from django.db import connection

    queue = f"webhooks-{uuid.uuid4().hex[:8]}"
    settings.STEPSCOPE_WEBHOOK_QUEUE = queue
    for name, value in {**WORKER_SETTINGS, "STEPSCOPE_WEBHOOK_QUEUE": queue}.items():
        monkeypatch.setenv(name, value)
    started = Workers(connection.settings_dict["NAME"])
    try:
        yield started
    finally:
        started.stop_all()


def test_a_worker_killed_while_it_posts_loses_no_event_and_resends_under_the_same_id(
    project: Project, owner: User, kill_workers: Workers, receiver: Receiver, allow_loopback: None
) -> None:
    queue = os.environ["STEPSCOPE_WEBHOOK_QUEUE"]
    webhook, secret = services.webhook_create(
        project=project, name="slow", url=receiver.url, events=["export.ready"], user=owner
    )
    second = kill_workers.spare(f"hooks-b-{queue}")
    first = kill_workers.start([queue], f"hooks-a-{queue}")
    receiver.hold.set()  # the first POST waits in the receiver until the worker is dead
    _emit(project, 3)
    assert receiver.held.wait(60), "the worker never posted"
    kill_workers.kill(first)
    receiver.release.set()
    deliveries = WebhookDelivery.objects.filter(webhook=webhook)
    assert {d.status for d in deliveries.all()} == {"pending"}
    kill_workers.take_over(second, [queue])

    def delivered() -> bool:
        # What the beat does every 10 s: queue the deliveries whose attempt is overdue.
        services.webhooks_sweep()
        return all(d.status == "delivered" for d in deliveries.all())

    assert wait_until(delivered, 60, poll=1.0)
    _verified(receiver, secret)
    ids = _ids_by_event(receiver)
    assert len(ids) == 3 and all(len(one) == 1 for one in ids.values())
    # The POST the dead worker made reached the receiver, and was sent again, under its id.
    sent = [item.headers["webhook-id"] for item in receiver.received]
    assert len(sent) == 4 and len(set(sent)) == 3
