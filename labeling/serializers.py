"""Shapes of the label API. Validation of values, tags and permissions lives in the label
service, which the pages use too."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from labeling.models import Queue, QueueAssignment, StepLabel, TrajectoryLabel
from labeling.services import LABEL_BATCH_MAX
from stepscope.serializers import StrictSerializer
from trajectories.formats.base import type_mismatch


class StepLabelSerializer(serializers.ModelSerializer[StepLabel]):
    annotator: serializers.SlugRelatedField[StepLabel] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    trajectory = serializers.IntegerField(source="step.trajectory_id", read_only=True)
    step_index = serializers.IntegerField(source="step.index", read_only=True)
    schema_version = serializers.IntegerField(source="schema.version", read_only=True)
    # The label's dimension: the schema's name, which every version of it shares and
    # label sources name (``human:majority/<schema_name>``).
    schema_name = serializers.CharField(source="schema.name", read_only=True)

    class Meta:
        model = StepLabel
        fields = [
            "id",
            "step",
            "step_index",
            "trajectory",
            "annotator",
            "schema",
            "schema_name",
            "schema_version",
            "value",
            "tags",
            "rationale",
            "correction",
            "status",
            "saw_model_scores",
            "time_spent_ms",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


SCHEMA_HELP = (
    "The id of the label schema the label was made with (``schema`` in the labels and"
    " schemas you read; its version is ``schema_version``). Left out: the project's active"
    " schema. An id of a schema that is no longer active is refused (409)."
)


class LabelValueField(serializers.IntegerField):
    """A label's value, taken as the file importers take it (:func:`type_mismatch`): a
    JSON integer, never a string, float or boolean turned into one."""

    def to_internal_value(self, data: Any) -> int:
        problem = type_mismatch(data, int)
        if problem is not None:
            raise serializers.ValidationError(problem)
        return int(super().to_internal_value(data))


class StepLabelWriteSerializer(StrictSerializer):
    """Create or update your own label on a step (an upsert: posting twice leaves one)."""

    step = serializers.IntegerField(min_value=1)
    value = LabelValueField(required=False, allow_null=True)
    first_error = serializers.BooleanField(required=False, default=False)
    schema = serializers.IntegerField(required=False, allow_null=True, help_text=SCHEMA_HELP)
    tags = serializers.ListField(child=serializers.CharField(max_length=60), required=False)
    rationale = serializers.CharField(required=False, allow_blank=True)
    correction = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    time_spent_ms = serializers.IntegerField(required=False, allow_null=True, min_value=0)
    queue = serializers.IntegerField(required=False, allow_null=True)


class BulkLabelItemSerializer(StrictSerializer):
    """One label of a batch: the step by ``step`` (id), or by ``trajectory`` (id) and
    ``index``. Fields left out keep what is stored, as in a single label post."""

    step = serializers.IntegerField(min_value=1, required=False)
    trajectory = serializers.IntegerField(min_value=1, required=False)
    index = serializers.IntegerField(min_value=0, required=False)
    value = LabelValueField(required=False, allow_null=True)
    first_error = serializers.BooleanField(required=False)
    schema = serializers.IntegerField(required=False, allow_null=True, help_text=SCHEMA_HELP)
    tags = serializers.ListField(child=serializers.CharField(max_length=60), required=False)
    rationale = serializers.CharField(required=False, allow_blank=True)
    correction = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    time_spent_ms = serializers.IntegerField(required=False, allow_null=True, min_value=0)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "step" not in attrs and not ("trajectory" in attrs and "index" in attrs):
            raise serializers.ValidationError({"step": ["Give step, or trajectory and index."]})
        if "step" in attrs and ("trajectory" in attrs or "index" in attrs):
            raise serializers.ValidationError(
                {"step": ["Give step, or trajectory and index, not both."]}
            )
        if attrs.get("value") is None:
            attrs.pop("value", None)
        if attrs.get("time_spent_ms") is None:
            attrs.pop("time_spent_ms", None)
        return attrs


class VerdictWriteSerializer(StrictSerializer):
    """Finish a trajectory, as the labeling page's finish panel does."""

    outcome = serializers.ChoiceField(TrajectoryLabel.Outcome.choices, required=False, default="")
    finish_reason = serializers.ChoiceField(
        TrajectoryLabel.FinishReason.choices,
        required=False,
        default="",
        help_text="Left out: found_error when a step is marked as the first error, else solution.",
    )
    comment = serializers.CharField(required=False, allow_blank=True, default="")
    flagged = serializers.BooleanField(required=False, default=False)


class TrajectorySubmitSerializer(VerdictWriteSerializer):
    queue = serializers.IntegerField(
        required=False, allow_null=True, help_text="the queue you leased the trajectory from"
    )


class DecisiveWriteSerializer(StrictSerializer):
    """Your decisive failure on a trajectory: which agent, at which step, decided that
    it failed, and why. Neither agent nor step clears it."""

    agent = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=200,
        help_text="One of the trajectory's agents; left out with a step: that step's agent.",
    )
    step = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=0, help_text="A step index."
    )
    reason = serializers.CharField(required=False, allow_blank=True, default="")
    queue = serializers.IntegerField(
        required=False, allow_null=True, help_text="the queue you leased the trajectory from"
    )


class BulkLabelsSerializer(VerdictWriteSerializer):
    """Many labels in one request, all or nothing. ``submit`` then submits every
    trajectory they touch, with the verdict fields given."""

    labels = serializers.ListField(
        child=BulkLabelItemSerializer(), allow_empty=False, max_length=LABEL_BATCH_MAX
    )
    queue = serializers.IntegerField(
        required=False, allow_null=True, help_text="the queue you leased the trajectories from"
    )
    schema = serializers.IntegerField(required=False, allow_null=True, help_text=SCHEMA_HELP)
    submit = serializers.BooleanField(required=False, default=False)


class TrajectoryLabelSerializer(serializers.ModelSerializer[TrajectoryLabel]):
    annotator: serializers.SlugRelatedField[TrajectoryLabel] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

    class Meta:
        model = TrajectoryLabel
        fields = [
            "id",
            "trajectory",
            "annotator",
            "status",
            "outcome",
            "finish_reason",
            "first_error_index",
            "comment",
            "flagged",
            "decisive_agent",
            "decisive_step",
            "decisive_reason",
            "submitted_at",
            "updated_at",
        ]
        read_only_fields = fields


class QueueSerializer(serializers.ModelSerializer[Queue]):
    project: serializers.SlugRelatedField[Queue] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )

    class Meta:
        model = Queue
        fields = [
            "id",
            "project",
            "name",
            "description",
            "overlap",
            "lease_seconds",
            "order",
            "schemas",
            "span_schemas",
            "is_active",
            "created_at",
        ]
        read_only_fields = fields


class LeaseSerializer(serializers.ModelSerializer[QueueAssignment]):
    """Your hold on one trajectory of a queue; label it with ``queue`` set to the queue."""

    queue = serializers.IntegerField(source="item.queue_id", read_only=True)
    trajectory = serializers.IntegerField(source="item.trajectory_id", read_only=True)

    class Meta:
        model = QueueAssignment
        fields = ["id", "queue", "trajectory", "status", "leased_at", "expires_at"]
        read_only_fields = fields
