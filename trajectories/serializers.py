from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from trajectories.formats.stepscope_typed import TypedRecords
from trajectories.forms import FORMAT_CHOICES
from trajectories.models import ImportBatch, Project, ProjectDeletion, Step, Trajectory
from trajectories.selection import (
    FILTERS,
    SelectionError,
    TrajectoryFilters,
    selection_definition,
    selection_parse,
)
from trajectories.services.projects import SlugTaken, project_slug_check


class ProjectSerializer(serializers.ModelSerializer[Project]):
    # Without the model's unique validator: a slug in use is checked where the message
    # can say that its project is being deleted (validate_slug).
    slug = serializers.SlugField(max_length=80)

    class Meta:
        model = Project
        fields = ["id", "slug", "name", "guidelines", "settings", "created_at"]
        # Settings change on the settings page, not when a project is created.
        read_only_fields = ["settings"]

    def validate_slug(self, slug: str) -> str:
        if self.instance is not None and self.instance.slug == slug:
            return slug
        try:
            project_slug_check(slug)
        except SlugTaken as taken:
            raise serializers.ValidationError(taken.message) from None
        return slug


class ProjectDeleteSerializer(serializers.Serializer[dict[str, str]]):
    confirm = serializers.CharField(help_text="The project's slug, typed to confirm.")


class ProjectDeletionSerializer(serializers.ModelSerializer[ProjectDeletion]):
    class Meta:
        model = ProjectDeletion
        fields = [
            "id",
            "slug",
            "name",
            "status",
            "total_steps",
            "removed_steps",
            "removed",
            "cancelled",
            "error",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class TrajectorySerializer(serializers.ModelSerializer[Trajectory]):
    project: serializers.SlugRelatedField[Project] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )

    class Meta:
        model = Trajectory
        fields = [
            "id",
            "project",
            "external_id",
            "source_format",
            "task_key",
            "task",
            "ground_truth",
            "model_name",
            "outcome_reward",
            "success",
            "metadata",
            "step_count",
            "content_hash",
            "import_batch",
            "parent",
            "branch_index",
            "policy_version",
            "training_step",
            "created_at",
        ]


class StepSerializer(serializers.ModelSerializer[Step]):
    class Meta:
        model = Step
        fields = [
            "id",
            "trajectory",
            "index",
            "kind",
            "role",
            "agent",
            "content",
            "tool_name",
            "tool_args",
            "metadata",
            "labelable",
            "prefix_hash",
            "policy_version",
            "training_step",
            "logprob_sum",
            "logprob_mean",
            "logprob_min",
            "advantage",
            "returns",
            "token_logprobs",
        ]


class ImportBatchSerializer(serializers.ModelSerializer[ImportBatch]):
    project = serializers.SlugRelatedField[Project](slug_field="slug", read_only=True)

    class Meta:
        model = ImportBatch
        fields = [
            "id",
            "project",
            "file_name",
            "source_format",
            "status",
            "skip_invalid",
            "processed_count",
            "created_count",
            "unchanged_count",
            "rejected_count",
            "step_count",
            "errors",
            "created_at",
            "finished_at",
        ]
        read_only_fields = fields


class TrajectoryListField(serializers.ListField):
    """A list of trajectory records, passed on as it came: the import's parser checks
    each record and names the bad ones by index and field (``record 3``, ``steps.0``),
    so checking each item here too would only double the work of a large push."""

    def run_child_validation(self, data: Any) -> list[Any] | TypedRecords:
        # Records the typed reader took (trajectories.api.PushParser) are checked already.
        return data if isinstance(data, TypedRecords) else list(data)


class ImportRequestSerializer(serializers.Serializer[dict[str, object]]):
    """Either ``file`` (multipart; imported by a worker) or ``trajectories`` (a JSON list
    of records in Stepscope's own format; imported at once, for small pushes)."""

    project = serializers.SlugField()
    format = serializers.ChoiceField(choices=FORMAT_CHOICES, default="stepscope")
    file = serializers.FileField(required=False)
    trajectories = TrajectoryListField(
        child=serializers.DictField(), required=False, max_length=10_000
    )
    mapping = serializers.JSONField(required=False)
    skip_invalid = serializers.BooleanField(default=False)

    def validate(self, attrs: dict[str, object]) -> dict[str, object]:
        if ("file" in attrs) == ("trajectories" in attrs):
            raise serializers.ValidationError("Send either a file or a list of trajectories.")
        if "trajectories" in attrs and attrs["format"] != "stepscope":
            raise serializers.ValidationError(
                {"format": "A JSON list of trajectories must be in the stepscope format."}
            )
        return attrs


def _filters_schema() -> dict[str, Any]:
    types = {str: "string", int: "integer", float: "number"}
    properties: dict[str, Any] = {}
    for name, spec in FILTERS.items():
        properties[name] = {"type": types[spec.kind], "description": spec.help}
        if spec.choices:
            properties[name]["enum"] = list(spec.choices)
    return {"type": "object", "properties": properties, "additionalProperties": False}


@extend_schema_field(_filters_schema())
class TrajectoryFiltersField(serializers.Field):
    """A selection of trajectories (``trajectories.selection``) as a JSON object, by the
    names the trajectory list takes; a name it does not know, or a bad value, is a 400
    naming it (``{"filters": {"bogus": [...]}}``)."""

    def to_internal_value(self, data: Any) -> TrajectoryFilters:
        if not isinstance(data, dict):
            raise serializers.ValidationError("Expected an object of filters, by name.")
        try:
            return selection_parse(data)
        except SelectionError as error:
            raise serializers.ValidationError(error.by_name()) from None

    def to_representation(self, value: TrajectoryFilters) -> dict[str, Any]:
        return selection_definition(value)
