from __future__ import annotations

from typing import Any

from rest_framework import serializers

from rollouts import answers
from rollouts.models import Policy, RolloutJob, RolloutSearch, StepMC
from rollouts.services import MAX_K
from scoring.serializers import ModelReferenceSerializer
from trajectories.models import Project
from trajectories.serializers import TrajectoryFiltersField


class PolicySerializer(ModelReferenceSerializer):
    class Meta(ModelReferenceSerializer.Meta):
        model = Policy
        fields = [
            *ModelReferenceSerializer.HEAD,
            *ModelReferenceSerializer.REFERENCE,
            "created_at",
        ]


class RolloutSearchSerializer(serializers.ModelSerializer[RolloutSearch]):
    probes = serializers.SerializerMethodField()

    class Meta:
        model = RolloutSearch
        fields = ["trajectory", "status", "first_error_index", "rollouts", "probes", "note"]
        read_only_fields = fields

    def get_probes(self, found: RolloutSearch) -> list[dict[str, int]]:
        return [
            {"step_index": step, "successes": successes, "k": k}
            for step, successes, k in found.state.get("probes", [])
        ]


class RolloutJobSerializer(serializers.ModelSerializer[RolloutJob]):
    project: serializers.SlugRelatedField[Project] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    policy_name = serializers.CharField(source="policy.name", read_only=True, default=None)

    class Meta:
        model = RolloutJob
        fields = [
            "id",
            "project",
            "policy",
            "policy_name",
            "mode",
            "k",
            "answer_check",
            "selection",
            "options",
            "max_continuations",
            "max_tokens",
            "status",
            "total",
            "done",
            "successes",
            "tokens",
            "truncated",
            "chunks_total",
            "chunks_done",
            "continuations_per_second",
            "tokens_per_second",
            "result",
            "error",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class RolloutJobDetailSerializer(RolloutJobSerializer):
    searches = RolloutSearchSerializer(many=True, read_only=True)

    class Meta(RolloutJobSerializer.Meta):
        fields = [*RolloutJobSerializer.Meta.fields, "searches"]
        read_only_fields = fields


class RolloutJobCreateSerializer(serializers.Serializer[Any]):
    """``policy`` is a name or an id. ``steps``: ``all``, ``first-error-search``, or a
    list of step ids (``critical`` with them replaces each step by an alternative)."""

    project = serializers.SlugField()
    policy = serializers.CharField()
    k = serializers.IntegerField(min_value=1, max_value=MAX_K)
    steps = serializers.JSONField(required=False)
    critical = serializers.BooleanField(default=False)
    alternatives = serializers.DictField(child=serializers.CharField(), required=False)
    trajectories = serializers.ListField(
        child=serializers.IntegerField(min_value=1), required=False, max_length=100_000
    )
    filters = TrajectoryFiltersField(required=False)
    answer_check = serializers.CharField(default=answers.DEFAULT_CHECK, max_length=300)
    max_continuations = serializers.IntegerField(required=False, allow_null=True, min_value=1)
    max_tokens = serializers.IntegerField(required=False, allow_null=True, min_value=1)
    chunk_continuations = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=4096
    )
    # A label source the finished job's MC labels are compared with (result.agreement).
    against = serializers.CharField(required=False, allow_blank=True, max_length=300)

    def validate_steps(self, value: Any) -> Any:
        if value in (RolloutJob.Mode.ALL, RolloutJob.Mode.SEARCH):
            return value
        if (
            isinstance(value, list)
            and value
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
        ):
            return value
        raise serializers.ValidationError(
            "use 'all', 'first-error-search' or a non-empty list of step ids"
        )

    def validate_answer_check(self, value: str) -> str:
        try:
            return str(answers.check_parse(value))
        except answers.AnswerCheckError as error:
            raise serializers.ValidationError(str(error)) from None

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        data.setdefault("steps", RolloutJob.Mode.ALL.value)
        if data["critical"] and not isinstance(data["steps"], list):
            raise serializers.ValidationError({"critical": "a critical-step check needs step ids"})
        return data


class StepMCSerializer(serializers.ModelSerializer[StepMC]):
    index = serializers.IntegerField(source="step.index", read_only=True)
    policy_name = serializers.CharField(source="policy.name", read_only=True)

    class Meta:
        model = StepMC
        fields = ["step", "index", "policy", "policy_name", "job", "k", "successes", "soft", "hard"]
        read_only_fields = fields
