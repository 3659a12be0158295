from __future__ import annotations

from typing import Any

from rest_framework import serializers

from scoring import prm
from scoring.methods import METHODS
from scoring.models import (
    AttributionRun,
    JudgePrompt,
    Scorer,
    ScoringRun,
    StepCredit,
    StepScore,
)
from scoring.services import NEUTRAL_CHOICES
from stepscope.serializers import StrictSerializer
from trajectories.models import Project
from trajectories.serializers import TrajectoryFiltersField


class JudgePromptCreateSerializer(StrictSerializer):
    """A judge's next prompt version. Leave ``system`` or ``template`` out for the mode's
    default text; placeholders are checked against the judge's mode."""

    system = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    template = serializers.CharField(required=False, trim_whitespace=False)
    note = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")


class JudgePromptSerializer(serializers.ModelSerializer[JudgePrompt]):
    class Meta:
        model = JudgePrompt
        fields = ["id", "version", "system", "template", "note", "example_steps", "created_at"]
        read_only_fields = fields


# What a scorer's and a policy's serializers share: the project by slug (none: every
# project), the reference's fields, and no model-level uniqueness validators (the
# constraints are conditional; the service refuses a taken name with a message). No
# docstring: the API schema would show it as each subclass's description.
class ModelReferenceSerializer(serializers.ModelSerializer[Any]):
    project: serializers.SlugRelatedField[Project] = serializers.SlugRelatedField(
        slug_field="slug", queryset=Project.objects.all(), required=False, allow_null=True
    )

    # In the order the API shows them; a subclass puts its own among them.
    HEAD = ["id", "project", "name"]
    REFERENCE = ["model_ref", "revision", "parameters", "trust_remote_code", "queue"]

    class Meta:
        read_only_fields = ["id", "created_at"]
        validators: list[Any] = []


class ScorerSerializer(ModelReferenceSerializer):
    metrics = serializers.SerializerMethodField()
    prompt = JudgePromptCreateSerializer(
        required=False,
        write_only=True,
        help_text="an llm-judge's prompt version 1 (default: the mode's default prompt)",
    )

    class Meta(ModelReferenceSerializer.Meta):
        model = Scorer
        fields = [
            *ModelReferenceSerializer.HEAD,
            "kind",
            *ModelReferenceSerializer.REFERENCE,
            "metrics",
            "prompt",
            "created_at",
        ]
        read_only_fields = ["id", "metrics", "created_at"]

    def get_metrics(self, scorer: Scorer) -> dict[str, Any] | None:
        metrics: dict[str, Any] | None = (scorer.artifact or {}).get("metrics")
        return metrics


class ScoringRunSerializer(serializers.ModelSerializer[ScoringRun]):
    project: serializers.SlugRelatedField[Project] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    scorer_name = serializers.CharField(source="scorer.name", read_only=True, default=None)
    prompt_version = serializers.IntegerField(source="prompt.version", read_only=True, default=None)

    class Meta:
        model = ScoringRun
        fields = [
            "id",
            "project",
            "scorer",
            "scorer_name",
            "prompt_version",
            "kind",
            "status",
            "selection",
            "parameters",
            "total",
            "done",
            "chunks_total",
            "chunks_done",
            "truncated",
            "steps_per_second",
            "metrics",
            "error",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class ScoringRunCreateSerializer(serializers.Serializer[Any]):
    """``scorer`` is a name (newest revision) or an id."""

    project = serializers.SlugField()
    scorer = serializers.CharField()
    only_unscored = serializers.BooleanField(default=False)
    trajectories = serializers.ListField(
        child=serializers.IntegerField(min_value=1), required=False, max_length=100_000
    )
    filters = TrajectoryFiltersField(required=False)
    queue = serializers.CharField(
        required=False, help_text="a labeling queue (name or id): score its trajectories"
    )
    prompt_version = serializers.IntegerField(
        required=False, min_value=1, help_text="an llm-judge's prompt version (default: newest)"
    )
    on_too_long = serializers.ChoiceField(
        ["skip", "fail"],
        required=False,
        help_text="an llm-judge's prompt longer than its context: skip (default: that step"
        " gets no verdict; the run's metrics list it under skipped, with the reason) or"
        " fail (the run fails, naming it)",
    )
    rubric = serializers.CharField(
        required=False,
        max_length=100,
        help_text="a rubric-mode llm-judge: the rubric it fills (default: the project's one"
        " current rubric)",
    )


class ScorerTrainSerializer(serializers.Serializer[Any]):
    project = serializers.SlugField()
    name = serializers.CharField(max_length=100)
    encoder = serializers.CharField(default=prm.DEFAULT_ENCODER, max_length=500)
    parameters = serializers.DictField(default=dict)
    neutral = serializers.ChoiceField(NEUTRAL_CHOICES, default="skip")
    holdout = serializers.FloatField(default=0.2, min_value=0.01, max_value=0.99)
    score_after = serializers.BooleanField(default=False)


class AttributionRunSerializer(serializers.ModelSerializer[AttributionRun]):
    project: serializers.SlugRelatedField[Project] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    scorer_name = serializers.CharField(source="scorer.name", read_only=True, default=None)

    class Meta:
        model = AttributionRun
        fields = [
            "id",
            "project",
            "method",
            "parameters",
            "scorer",
            "scorer_name",
            "scorer_revision",
            "label_source",
            "selection",
            "status",
            "total",
            "done",
            "chunks_total",
            "chunks_done",
            "steps_per_second",
            "metrics",
            "error",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class AttributionRunCreateSerializer(serializers.Serializer[Any]):
    """``scorer`` is a name (newest revision) or an id; ``labels`` a label source whose
    values are the step rewards; ``parameters`` the method's (see ``manage.py attribute
    --help``); ``step`` the step of a ``token-saliency`` run."""

    project = serializers.SlugField()
    method = serializers.ChoiceField(list(METHODS))
    scorer = serializers.CharField(required=False, allow_blank=True, default="")
    labels = serializers.CharField(required=False, allow_blank=True, default="", max_length=200)
    parameters = serializers.DictField(default=dict)
    trajectories = serializers.ListField(
        child=serializers.IntegerField(min_value=1), required=False, max_length=100_000
    )
    filters = TrajectoryFiltersField(required=False)
    step = serializers.IntegerField(required=False, min_value=1)


class StepCreditSerializer(serializers.ModelSerializer[StepCredit]):
    trajectory = serializers.IntegerField(source="step.trajectory_id", read_only=True)
    index = serializers.IntegerField(source="step.index", read_only=True)

    class Meta:
        model = StepCredit
        fields = ["id", "step", "trajectory", "index", "value", "level", "detail"]
        read_only_fields = fields


class StepScoreSerializer(serializers.ModelSerializer[StepScore]):
    index = serializers.IntegerField(source="step.index", read_only=True)
    scorer_name = serializers.CharField(source="scorer.name", read_only=True)
    scorer_revision = serializers.CharField(source="scorer.revision", read_only=True)

    class Meta:
        model = StepScore
        fields = ["step", "index", "scorer", "scorer_name", "scorer_revision", "run", "value"]
        read_only_fields = fields


class TrajectoryCreditSerializer(serializers.ModelSerializer[StepCredit]):
    index = serializers.IntegerField(source="step.index", read_only=True)
    method = serializers.CharField(source="run.method", read_only=True)

    class Meta:
        model = StepCredit
        fields = ["step", "index", "run", "method", "value", "level", "detail"]
        read_only_fields = fields


class ScoresImportSerializer(StrictSerializer):
    """Scores computed elsewhere, stored as ``scorer``'s (created, kind ``external``, when
    the project has no scorer of that name). All or nothing unless ``skip_invalid``."""

    project = serializers.SlugField()
    scorer = serializers.CharField(max_length=100)
    scores = serializers.ListField(
        child=serializers.JSONField(),
        allow_empty=False,
        max_length=100_000,
        help_text="objects {trajectory: external id, step: index, value: 0..1}",
    )
    skip_invalid = serializers.BooleanField(default=False)
