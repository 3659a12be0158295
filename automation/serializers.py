"""The automation API's shapes. Creation takes names the rest of the API takes (a
selection by the list's filter names, a scorer by name, a queue or webhook by id) and
refuses fields it does not know."""

from __future__ import annotations

from rest_framework import serializers

from automation.models import Rule, RuleFiring, Webhook, WebhookDelivery
from scoring.models import Scorer
from stepscope.events import EVENT_KINDS
from stepscope.serializers import StrictSerializer
from trajectories.models import Project
from trajectories.serializers import TrajectoryFiltersField


class RuleSerializer(serializers.ModelSerializer[Rule]):
    project = serializers.SlugRelatedField[Project](slug_field="slug", read_only=True)
    scorer = serializers.SlugRelatedField[Scorer](slug_field="name", read_only=True)
    firings = serializers.SerializerMethodField()

    class Meta:
        model = Rule
        fields = [
            "id",
            "project",
            "name",
            "selection",
            "rate",
            "action",
            "queue",
            "scorer",
            "webhook",
            "export",
            "active",
            "created_at",
            "last_error",
            "firings",
        ]
        read_only_fields = fields

    def get_firings(self, rule: Rule) -> int:
        count = getattr(rule, "firing_count", None)
        return int(count) if count is not None else rule.firings.count()


class RuleCreateSerializer(StrictSerializer):
    project = serializers.SlugField()
    name = serializers.CharField(max_length=200)
    selection = TrajectoryFiltersField(required=False)
    rate = serializers.FloatField(default=1.0, min_value=0.0, max_value=1.0)
    action = serializers.ChoiceField(choices=Rule.Action.values)
    queue = serializers.IntegerField(required=False, min_value=1)
    scorer = serializers.CharField(required=False, max_length=200)
    webhook = serializers.IntegerField(required=False, min_value=1)
    export = serializers.DictField(required=False)
    active = serializers.BooleanField(default=True)


class RuleActiveSerializer(StrictSerializer):
    active = serializers.BooleanField()


class WebhookActiveSerializer(StrictSerializer):
    active = serializers.BooleanField()


class RuleFiringSerializer(serializers.ModelSerializer[RuleFiring]):
    class Meta:
        model = RuleFiring
        fields = ["id", "trajectory", "trigger", "source", "result", "fired_at"]
        read_only_fields = fields


class WebhookSerializer(serializers.ModelSerializer[Webhook]):
    project = serializers.SlugRelatedField[Project](slug_field="slug", read_only=True)

    class Meta:
        model = Webhook
        fields = ["id", "project", "name", "url", "events", "active", "created_at"]
        read_only_fields = fields


class WebhookCreatedSerializer(WebhookSerializer):
    """The answer to a creation: the only one that holds the secret."""

    secret = serializers.SerializerMethodField()

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret"]
        read_only_fields = fields

    def get_secret(self, webhook: Webhook) -> str:
        return str(self.context["secret"])


class WebhookCreateSerializer(StrictSerializer):
    project = serializers.SlugField()
    name = serializers.CharField(max_length=200)
    url = serializers.URLField(max_length=2000)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=list(EVENT_KINDS)), allow_empty=True
    )


class WebhookDeliverySerializer(serializers.ModelSerializer[WebhookDelivery]):
    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "webhook",
            "message_id",
            "event_id",
            "kind",
            "payload",
            "status",
            "attempts",
            "next_attempt_at",
            "last_code",
            "log",
            "created_at",
            "delivered_at",
        ]
        read_only_fields = fields
