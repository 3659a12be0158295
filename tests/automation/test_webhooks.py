"""Webhooks without a worker: the secret shown once, the address check at creation and at
sending, the delivery an event writes in its own transaction, and redelivery by hand."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from django.test import Client
from rest_framework.authtoken.models import Token

from automation import services
from automation.models import Webhook, WebhookDelivery
from stepscope.events import event_emit
from tests.automation.conftest import Receiver
from tests.exports.test_batches import export_into, label
from tests.factories import trajectory_with_steps
from trajectories.models import Project
from trajectories.selection import TrajectoryFilters

pytestmark = pytest.mark.django_db


def test_the_page_shows_the_secret_once_and_refuses_loopback(
    project: Project, owner: User, settings: Any
) -> None:
    client = Client()
    client.force_login(owner)
    form = {"name": "trainer", "url": "http://127.0.0.1:9000/hook", "events": ["export.ready"]}
    refused = client.post(f"/p/{project.slug}/webhooks/", form)
    assert refused.status_code == 400
    assert "private, loopback or link-local" in refused.content.decode()
    assert not Webhook.objects.exists()
    settings.STEPSCOPE_WEBHOOK_ALLOW_PRIVATE = True
    made = client.post(f"/p/{project.slug}/webhooks/", form)
    assert made.status_code == 200
    webhook = Webhook.objects.get()
    assert webhook.events == ["export.ready"]
    assert webhook.secret in made.content.decode()
    again = client.get(f"/p/{project.slug}/webhooks/").content.decode()
    assert webhook.secret not in again and "trainer" in again
    detail = client.get(f"/p/{project.slug}/webhooks/{webhook.pk}/").content.decode()
    assert webhook.secret not in detail and 'id="no-deliveries"' in detail


def test_the_api_gives_the_secret_in_the_creation_answer_only(
    project: Project, owner: User, allow_loopback: None
) -> None:
    token = Token.objects.get_or_create(user=owner)[0].key
    api = Client(HTTP_AUTHORIZATION=f"Token {token}")
    body = {"project": project.slug, "name": "t", "url": "http://127.0.0.1:1/x", "events": []}
    unknown = api.post(
        "/api/v1/webhooks/", json.dumps({**body, "events": ["nope"]}), "application/json"
    )
    assert unknown.status_code == 400 and "events" in unknown.json()
    made = api.post("/api/v1/webhooks/", json.dumps(body), "application/json")
    assert made.status_code == 201
    secret = made.json()["secret"]
    assert secret.startswith("whsec_")
    shown = api.get(f"/api/v1/webhooks/{made.json()['id']}/").json()
    assert "secret" not in shown and shown["url"] == body["url"]


def test_an_event_rolled_back_sends_nothing_and_one_committed_one_delivery_per_webhook(
    project: Project, owner: User, allow_loopback: None
) -> None:
    wants, _ = services.webhook_create(
        project=project, name="a", url="http://127.0.0.1:1/a", events=["queue.finished"], user=owner
    )
    services.webhook_create(
        project=project, name="b", url="http://127.0.0.1:1/b", events=["export.ready"], user=owner
    )
    with pytest.raises(RuntimeError), transaction.atomic():
        event_emit(project_id=project.pk, kind="queue.finished", data={"queue": 1})
        raise RuntimeError("the submission failed")
    assert not WebhookDelivery.objects.exists()
    event_emit(project_id=project.pk, kind="queue.finished", data={"queue": 1})
    delivery = WebhookDelivery.objects.get()
    assert delivery.webhook == wants and delivery.kind == "queue.finished"
    assert delivery.payload["data"] == {"queue": 1}
    with pytest.raises(ValueError, match="unknown event kind"):
        event_emit(project_id=project.pk, kind="queue.done", data={})


def test_an_attempt_to_an_address_now_private_fails_without_a_request(
    project: Project, owner: User, receiver: Receiver, settings: Any
) -> None:
    settings.STEPSCOPE_WEBHOOK_ALLOW_PRIVATE = True
    webhook, _ = services.webhook_create(
        project=project, name="a", url=receiver.url, events=[], user=owner
    )
    delivery = services.webhook_event_record(webhook=webhook, kind="rule.fired", data={})
    settings.STEPSCOPE_WEBHOOK_ALLOW_PRIVATE = False
    services.webhook_deliver(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert delivery.status == "failed" and receiver.received == []
    assert "loopback" in delivery.log[0]["error"]
    # Sent again by hand, once allowed: the same webhook-id.
    settings.STEPSCOPE_WEBHOOK_ALLOW_PRIVATE = True
    client = Client()
    client.force_login(owner)
    answer = client.post(f"/p/{project.slug}/webhook-deliveries/{delivery.pk}/redeliver/")
    assert answer.status_code == 302
    services.webhook_deliver(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert delivery.status == "delivered" and delivery.attempts == 1
    assert [r.headers["webhook-id"] for r in receiver.received] == [delivery.message_id]
    assert [attempt["code"] for attempt in delivery.log] == [None, 204]


def test_a_batch_s_new_version_is_an_event_naming_its_pin(
    project: Project, owner: User, allow_loopback: None, settings: Any, tmp_path: Path
) -> None:
    """A training job subscribed to ``batch.version`` hears of each new version of a
    batch with the name it pins (``rl-batch@2``), in the export's finishing transaction."""
    settings.MEDIA_ROOT = tmp_path / "media"
    services.webhook_create(
        project=project,
        name="trainer",
        url="http://127.0.0.1:1/t",
        events=["batch.version"],
        user=owner,
    )
    trajectory = trajectory_with_steps(project, ["a", "b"], external_id="t1")
    label(trajectory, 0, 1, owner)
    label(trajectory, 1, -1, owner)
    export_into(project, owner)
    export_into(project, owner)
    pins = [
        delivery.payload["data"]["pin"]
        for delivery in WebhookDelivery.objects.filter(kind="batch.version").order_by("pk")
    ]
    assert pins == ["rl-batch@1", "rl-batch@2"]


def test_an_attempt_connects_to_the_address_it_checked_not_a_second_answer(
    project: Project, owner: User, receiver: Receiver, settings: Any, monkeypatch: Any
) -> None:
    """DNS rebinding: a name that answers a public address to the check and loopback to
    the connection. The attempt resolves once and connects to what it checked, so the
    service on loopback never sees the request."""
    settings.STEPSCOPE_WEBHOOK_ALLOW_PRIVATE = True
    webhook, _ = services.webhook_create(
        project=project,
        name="r",
        url=f"http://rebind.example:{receiver.port}/hook",
        events=[],
        user=owner,
    )
    settings.STEPSCOPE_WEBHOOK_ALLOW_PRIVATE = False
    settings.STEPSCOPE_WEBHOOK_TIMEOUT_SECONDS = 1
    real = socket.getaddrinfo
    answers: list[str] = []

    def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "rebind.example":
            return real(host, port, *args, **kwargs)
        answers.append("93.184.215.14" if not answers else "127.0.0.1")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[-1], port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    delivery = services.webhook_event_record(webhook=webhook, kind="rule.fired", data={})
    services.webhook_deliver(delivery_id=delivery.pk)
    assert answers == ["93.184.215.14"]
    assert receiver.received == []


def test_a_webhook_switched_off_receives_nothing_until_it_is_on_again(
    project: Project, owner: User, receiver: Receiver, allow_loopback: None
) -> None:
    webhook, _ = services.webhook_create(
        project=project, name="off", url=receiver.url, events=["export.ready"], user=owner
    )
    client = Client()
    client.force_login(owner)
    page = f"/p/{project.slug}/webhooks/{webhook.pk}/"
    assert client.post(f"{page}active/", {"active": "0"}).status_code == 302
    html = client.get(page).content.decode()
    assert "it receives nothing" in html and "Switch on" in html
    # An event it subscribed to makes no delivery; a rule's action makes one that waits.
    services.webhook_events_record(project.pk, "export.ready", {})
    assert not WebhookDelivery.objects.filter(kind="export.ready").exists()
    waiting = services.webhook_event_record(webhook=webhook, kind="rule.fired", data={})
    services.webhook_deliver(delivery_id=waiting.pk)
    waiting.refresh_from_db()
    assert (waiting.status, waiting.attempts, receiver.received) == ("pending", 0, [])
    refused = client.post(f"/p/{project.slug}/webhook-deliveries/{waiting.pk}/redeliver/")
    assert "switched off" in client.get(refused["Location"]).content.decode()
    # On again: what waited is sent.
    client.post(f"{page}active/", {"active": "1"})
    services.webhook_deliver(delivery_id=waiting.pk)
    waiting.refresh_from_db()
    assert waiting.status == "delivered"
    assert [r.headers["webhook-id"] for r in receiver.received] == [waiting.message_id]


def test_a_webhook_is_deleted_once_confirmed_and_never_under_a_rule(
    project: Project, owner: User, allow_loopback: None
) -> None:
    webhook, _ = services.webhook_create(
        project=project, name="gone", url="http://127.0.0.1:1/x", events=[], user=owner
    )
    services.webhook_event_record(webhook=webhook, kind="rule.fired", data={})
    rule = services.rule_create(
        project=project,
        name="calls it",
        filters=TrajectoryFilters(),
        action="webhook",
        webhook=webhook,
        user=owner,
    )
    client = Client()
    client.force_login(owner)
    delete = f"/p/{project.slug}/webhooks/{webhook.pk}/delete/"
    unconfirmed = client.post(delete, {"confirm": "go"})
    assert "Type the webhook" in client.get(unconfirmed["Location"]).content.decode()
    under_rule = client.post(delete, {"confirm": "gone"})
    assert "calls it" in client.get(under_rule["Location"]).content.decode()
    assert Webhook.objects.filter(pk=webhook.pk).exists()

    token = Token.objects.get_or_create(user=owner)[0].key
    api = Client(HTTP_AUTHORIZATION=f"Token {token}")
    conflict = api.delete(f"/api/v1/webhooks/{webhook.pk}/")
    assert conflict.status_code == 409 and "calls it" in conflict.json()["webhook"][0]
    off = api.post(
        f"/api/v1/webhooks/{webhook.pk}/active/", {"active": False}, content_type="application/json"
    )
    assert off.status_code == 200 and off.json()["active"] is False
    junk = api.post(
        f"/api/v1/webhooks/{webhook.pk}/active/",
        {"active": True, "colour": "red"},
        content_type="application/json",
    )
    assert junk.status_code == 400 and "colour" in junk.json()

    rule.delete()
    done = client.post(delete, {"confirm": "gone"})
    assert done["Location"] == f"/p/{project.slug}/webhooks/"
    assert not Webhook.objects.filter(pk=webhook.pk).exists()
    assert not WebhookDelivery.objects.filter(webhook_id=webhook.pk).exists()
