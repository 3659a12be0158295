"""Rules (a selection, a sampling rate and an action, run as trajectories arrive) and
their firings; webhooks and their deliveries."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

from labeling.models import Queue
from scoring.models import Scorer
from trajectories.models import Project, Trajectory


class Rule(models.Model):
    """Acts on each trajectory of the project that arrives (new or grown) and passes
    ``selection`` (the filters by the list's names) and the sampling ``rate``, once."""

    class Action(models.TextChoices):
        QUEUE = "queue", "Add to a labeling queue"
        SCORE = "score", "Start a scoring or judge run"
        EXPORT = "export", "Start an export"
        WEBHOOK = "webhook", "Call a webhook"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="rules")
    name = models.CharField(max_length=200)
    selection = models.JSONField(default=dict, blank=True)
    rate = models.FloatField(default=1.0)
    action = models.CharField(max_length=10, choices=Action.choices)
    queue = models.ForeignKey(Queue, null=True, blank=True, on_delete=models.CASCADE)
    scorer = models.ForeignKey(Scorer, null=True, blank=True, on_delete=models.CASCADE)
    webhook = models.ForeignKey(
        "automation.Webhook", null=True, blank=True, on_delete=models.CASCADE
    )
    # An export's parameters (format, labels, neutral, ...), as the export API takes them.
    export = models.JSONField(default=dict, blank=True)
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # Why the last try to act failed (a scorer that cannot run, a dead broker); cleared
    # when it next acts.
    last_error = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="rule_name_unique"),
            models.CheckConstraint(
                condition=models.Q(rate__gt=0, rate__lte=1), name="rule_rate_range"
            ),
        ]
        indexes = [models.Index(fields=["project", "active"], name="rule_project_active")]

    def __str__(self) -> str:
        return self.name


class RuleFiring(models.Model):
    """The rule acted on the trajectory: when, why (an arrival of what, or a backfill)
    and what it did (``result``: the queue, the run, the export or the delivery)."""

    class Trigger(models.TextChoices):
        ARRIVAL = "arrival"
        BACKFILL = "backfill"

    rule = models.ForeignKey(Rule, on_delete=models.CASCADE, related_name="firings")
    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="+")
    trigger = models.CharField(max_length=10, choices=Trigger.choices)
    source = models.CharField(max_length=20, blank=True)  # import, push, live, backfill
    result = models.JSONField(default=dict)
    fired_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["rule", "trajectory"], name="rulefiring_once")
        ]
        indexes = [models.Index(fields=["rule", "-id"], name="rulefiring_recent")]

    def __str__(self) -> str:
        return f"rule {self.rule_id} on trajectory {self.trajectory_id}"


class ArrivalMissed(models.Model):
    """An arrival whose rules could not be queued (the broker was down): kept until the
    worker's sweep (``automation.rules_sweep``) has run the project's rules over it, so a
    broker outage delays a rule's action but loses none."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    trajectory_ids = ArrayField(models.BigIntegerField(), default=list, blank=True)
    import_batch_id = models.BigIntegerField(null=True, blank=True)
    source = models.CharField(max_length=20, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"missed arrival {self.pk} of project {self.project_id}"


class Webhook(models.Model):
    """A URL the project's events are POSTed to, signed with ``secret``
    (``automation/signing.py``)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="webhooks")
    name = models.CharField(max_length=200)
    url = models.URLField(max_length=2000)
    # The kinds of event it receives (stepscope.events.EVENT_KINDS); a rule's webhook
    # action reaches it whatever these are.
    events = models.JSONField(default=list, blank=True)
    # Kept to sign with (an HMAC needs the key itself); shown once, at creation.
    secret = models.CharField(max_length=100)
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="webhook_name_unique")
        ]

    def __str__(self) -> str:
        return self.name


class WebhookDelivery(models.Model):
    """One event for one webhook, tried until the receiver answers 2xx (at least once).
    ``message_id`` is the ``webhook-id`` header: the same on every attempt and on a
    redelivery, so a receiver drops repeats by it."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    message_id = models.CharField(max_length=40, unique=True)
    # The event's id, shared by its deliveries to several webhooks.
    event_id = models.UUIDField(default=uuid.uuid4)
    kind = models.CharField(max_length=40)
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    # Every attempt: when, the response code (null: no answer), the error, milliseconds.
    log = models.JSONField(default=list)
    last_code = models.PositiveSmallIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["webhook", "-id"], name="delivery_recent"),
            models.Index(
                fields=["next_attempt_at"],
                name="delivery_pending_due",
                condition=models.Q(status="pending"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.message_id}"
