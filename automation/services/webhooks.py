"""Webhooks: an event becomes one delivery row per webhook that wants it, written in the
event's own transaction and queued when it commits; a worker POSTs it, signed
(``automation/signing.py``), until the receiver answers 2xx, waiting longer after each
failure (``STEPSCOPE_WEBHOOK_RETRY_SECONDS``).

At least once, never under two ids: the delivery's ``message_id`` is the ``webhook-id``
of every attempt. Sending holds the row's lock (``FOR UPDATE SKIP LOCKED``), so two
copies of the task (a redelivered message, the sweep) never send at once, and a copy
that finds the row delivered, or not yet due, does nothing. A worker killed while it
sends loses its lock with its connection; the sweep (every 10 s in the beat) queues any
pending delivery whose time has passed."""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from typing import Any

import httpx
import orjson
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from automation import signing
from automation.addresses import AddressRefused, address_pin, url_check
from automation.models import Webhook, WebhookDelivery
from stepscope.events import EVENT_KINDS
from stepscope.queueing import broker_require
from trajectories.models import Project

logger = logging.getLogger(__name__)

# A delivery whose next attempt is this late is taken to have lost its task.
SWEEP_GRACE = dt.timedelta(seconds=5)
SWEEP_BATCH = 500
# A copy of the task this early for its attempt leaves it to the one that is due.
EARLY_SLACK = dt.timedelta(seconds=1)
# What the log keeps of a response's body (the receiver's own error text).
BODY_KEPT = 500


class WebhookError(ValueError):
    """A webhook that cannot be saved; ``field`` names the value at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def webhook_create(
    *, project: Project, name: str, url: str, events: list[str], user: User | None
) -> tuple[Webhook, str]:
    """A webhook, and its secret: the only time the secret is shown."""
    name = name.strip()
    if not name:
        raise WebhookError("name", "Give the webhook a name.")
    if Webhook.objects.filter(project=project, name=name).exists():
        raise WebhookError("name", f"A webhook named {name!r} exists already.")
    unknown = sorted(set(events) - EVENT_KINDS.keys())
    if unknown:
        raise WebhookError(
            "events",
            f"Unknown events {', '.join(unknown)}; the events are {', '.join(EVENT_KINDS)}.",
        )
    try:
        url_check(url, allow_private=settings.STEPSCOPE_WEBHOOK_ALLOW_PRIVATE)
    except AddressRefused as refused:
        raise WebhookError("url", f"Refused: {refused}.") from None
    secret = signing.secret_new()
    webhook = Webhook.objects.create(
        project=project,
        name=name,
        url=url,
        events=sorted(set(events)),
        secret=secret,
        created_by=user,
    )
    return webhook, secret


def webhook_set_active(*, webhook: Webhook, active: bool) -> Webhook:
    """Switch a webhook off or on. Off, it receives nothing: no delivery is made for the
    events it subscribed to, and its pending deliveries (a rule's action still records
    one) wait unsent; switched on again, they are queued at once."""
    with transaction.atomic():
        Webhook.objects.filter(pk=webhook.pk).update(active=active)
        webhook.active = active
        if active:
            waiting = list(
                webhook.deliveries.filter(status=WebhookDelivery.Status.PENDING).values_list(
                    "pk", flat=True
                )
            )
            transaction.on_commit(lambda: _enqueue_all(waiting))
    return webhook


def _enqueue_all(delivery_ids: list[int]) -> None:
    for pk in delivery_ids:
        _enqueue(pk)


def webhook_delete(*, webhook: Webhook) -> None:
    """Delete a webhook and its deliveries; refused (naming them) while a rule calls it:
    deleting it would delete those rules."""
    calling = list(webhook.rule_set.order_by("name").values_list("name", flat=True))
    if calling:
        raise WebhookError(
            "webhook",
            f"{len(calling)} rule(s) call this webhook ({', '.join(calling[:5])}): change or"
            " delete them first, or switch the webhook off",
        )
    webhook.delete()


def webhook_events_record(project_id: int, kind: str, data: dict[str, Any]) -> None:
    """The event listener (``stepscope.events``): a delivery for each of the project's
    active webhooks that wants ``kind``, in the caller's transaction."""
    wanted = Webhook.objects.filter(project_id=project_id, active=True, events__contains=[kind])
    if kind == "rule.fired" and data.get("action") == "webhook":
        # The rule's own webhook has its delivery from the action already.
        wanted = wanted.exclude(pk=data.get("result", {}).get("webhook"))
    if webhooks := list(wanted):
        event_id = uuid.uuid4()
        for webhook in webhooks:
            webhook_event_record(webhook=webhook, kind=kind, data=data, event_id=event_id)


def webhook_event_record(
    *, webhook: Webhook, kind: str, data: dict[str, Any], event_id: uuid.UUID | None = None
) -> WebhookDelivery:
    """One delivery of an event to ``webhook``, queued once the caller's transaction
    commits."""
    event_id = event_id or uuid.uuid4()
    now = timezone.now()
    project = Project.objects.only("slug").get(pk=webhook.project_id)
    message_id = f"msg_{uuid.uuid4().hex}"
    delivery = WebhookDelivery.objects.create(
        webhook=webhook,
        message_id=message_id,
        event_id=event_id,
        kind=kind,
        payload={
            "type": kind,
            "event_id": str(event_id),
            "timestamp": now.isoformat(),
            "project": {"id": webhook.project_id, "slug": project.slug},
            "data": data,
        },
        next_attempt_at=now,
    )
    transaction.on_commit(lambda: _enqueue(delivery.pk))
    return delivery


def _enqueue(delivery_id: int, countdown: float = 0.0) -> None:
    from automation.tasks import webhook_deliver as task

    try:
        task.apply_async(
            (delivery_id,), countdown=countdown, queue=settings.STEPSCOPE_WEBHOOK_QUEUE
        )
    except Exception as error:  # the sweep queues it once the broker is back
        logger.warning("webhook delivery %s not queued: %s", delivery_id, error)


def webhook_deliver(*, delivery_id: int) -> WebhookDelivery | None:
    """One attempt at a delivery, if it is pending and due (the task's body)."""
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("webhook")
            .filter(pk=delivery_id)
            .first()
        )
        if delivery is None or delivery.status != WebhookDelivery.Status.PENDING:
            return delivery  # being sent by another copy of the task, or done with
        if not delivery.webhook.active:
            return delivery  # waits until the webhook is switched on again
        now = timezone.now()
        if delivery.next_attempt_at > now + EARLY_SLACK:
            return delivery
        code, error, elapsed = _post(delivery, now)
        delivery.attempts += 1
        delivery.last_code = code
        entry = {"at": now.isoformat(), "code": code, "error": error, "ms": elapsed}
        delivery.log = [*delivery.log, entry][-50:]
        retries = settings.STEPSCOPE_WEBHOOK_RETRY_SECONDS
        wait: float | None = None
        if code is not None and 200 <= code < 300:
            delivery.status = WebhookDelivery.Status.DELIVERED
            delivery.delivered_at = timezone.now()
        elif error.startswith("refused:") or delivery.attempts > len(retries):
            delivery.status = WebhookDelivery.Status.FAILED
        else:
            wait = retries[delivery.attempts - 1]
            delivery.next_attempt_at = timezone.now() + dt.timedelta(seconds=wait)
        delivery.save(
            update_fields=[
                "attempts",
                "last_code",
                "log",
                "status",
                "delivered_at",
                "next_attempt_at",
            ]
        )
        if wait is not None:
            pk, countdown = delivery.pk, wait
            transaction.on_commit(lambda: _enqueue(pk, countdown))
    return delivery


def _post(delivery: WebhookDelivery, now: dt.datetime) -> tuple[int | None, str, int]:
    """POST the delivery once: (response code or None, error text, milliseconds)."""
    webhook = delivery.webhook
    started = time.monotonic()
    try:
        # Checked and pinned: the connection goes to the address the check passed.
        pinned = address_pin(webhook.url, allow_private=settings.STEPSCOPE_WEBHOOK_ALLOW_PRIVATE)
    except AddressRefused as refused:
        return None, f"refused: {refused}", 0
    body = orjson.dumps(delivery.payload)
    headers = signing.headers(webhook.secret, delivery.message_id, int(now.timestamp()), body)
    headers["user-agent"] = "Stepscope-Webhooks/1"
    headers.update(pinned.headers)
    timeout = settings.STEPSCOPE_WEBHOOK_TIMEOUT_SECONDS
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False) as client:
            response = client.post(
                pinned.url, extensions=pinned.extensions, content=body, headers=headers
            )
    except httpx.HTTPError as error:
        elapsed = int((time.monotonic() - started) * 1000)
        return None, f"{type(error).__name__}: {error}"[:BODY_KEPT], elapsed
    elapsed = int((time.monotonic() - started) * 1000)
    text = "" if response.is_success else response.text[:BODY_KEPT]
    return response.status_code, text, elapsed


def webhook_redeliver(*, delivery: WebhookDelivery) -> WebhookDelivery:
    """Send a delivery again now, by hand, under its own ``webhook-id`` (a receiver that
    took it already can tell), with its retries anew."""
    if not delivery.webhook.active:
        name = delivery.webhook.name
        raise WebhookError("webhook", f"{name} is switched off: switch it on to send again")
    broker_require()
    with transaction.atomic():
        WebhookDelivery.objects.filter(pk=delivery.pk).update(
            status=WebhookDelivery.Status.PENDING,
            attempts=0,
            next_attempt_at=timezone.now(),
        )
        pk = delivery.pk
        transaction.on_commit(lambda: _enqueue(pk))
    delivery.refresh_from_db()
    return delivery


def webhooks_sweep() -> int:
    """Queue the pending deliveries whose attempt is overdue (their task was lost with a
    worker, or never queued while the broker was down); how many."""
    overdue = list(
        WebhookDelivery.objects.filter(
            status=WebhookDelivery.Status.PENDING,
            next_attempt_at__lt=timezone.now() - SWEEP_GRACE,
            webhook__active=True,
        )
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:SWEEP_BATCH]
    )
    for pk in overdue:
        _enqueue(pk)
    return len(overdue)
