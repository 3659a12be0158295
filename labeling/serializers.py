"""Shapes of the label API. Validation of values, tags and permissions lives in the label
service, which the pages use too."""

from __future__ import annotations

from rest_framework import serializers

from labeling.models import StepLabel


class StepLabelSerializer(serializers.ModelSerializer[StepLabel]):
    annotator: serializers.SlugRelatedField[StepLabel] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    trajectory = serializers.IntegerField(source="step.trajectory_id", read_only=True)
    step_index = serializers.IntegerField(source="step.index", read_only=True)
    schema_version = serializers.IntegerField(source="schema.version", read_only=True)

    class Meta:
        model = StepLabel
        fields = [
            "id",
            "step",
            "step_index",
            "trajectory",
            "annotator",
            "schema",
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


class StepLabelWriteSerializer(serializers.Serializer[dict[str, object]]):
    """Create or update your own label on a step (an upsert: posting twice leaves one)."""

    step = serializers.IntegerField(min_value=1)
    value = serializers.IntegerField(required=False, allow_null=True)
    first_error = serializers.BooleanField(required=False, default=False)
    schema = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="The schema version the label was made with; a stale one is refused (409).",
    )
    tags = serializers.ListField(child=serializers.CharField(max_length=60), required=False)
    rationale = serializers.CharField(required=False, allow_blank=True)
    correction = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    time_spent_ms = serializers.IntegerField(required=False, allow_null=True, min_value=0)
    queue = serializers.IntegerField(required=False, allow_null=True)
