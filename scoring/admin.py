"""Django admin for scorers (where admins register PRMs), runs, step scores and credits."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

from scoring import prm
from scoring.models import (
    AttributionRun,
    JudgePrompt,
    JudgeReply,
    Scorer,
    ScoringRun,
    StepCredit,
    StepScore,
)
from scoring.prm.model_refs import ModelRefError
from scoring.references import reference_check
from trajectories.admin import BigTableAdmin


class ModelReferenceForm(forms.ModelForm):
    """The admin form of a model reference (a scorer, a policy): its parameters parsed
    as the reference's own, then the check the services and the API make
    (``scoring.references.reference_check``), each error on its field."""

    REFERENCE_FIELDS = (
        "project",
        "name",
        "model_ref",
        "revision",
        "parameters",
        "trust_remote_code",
        "queue",
        "created_by",
    )

    # What typed_parameters raises for parameters the reference cannot run with.
    PARAMETER_ERRORS: tuple[type[Exception], ...] = ()

    def typed_parameters(self, cleaned: dict[str, Any]) -> Any:
        """The reference's typed parameters (raising one of ``PARAMETER_ERRORS``)."""
        raise NotImplementedError

    def reference_needs(self, cleaned: dict[str, Any], params: Any) -> dict[str, Any]:
        """``needs_model`` and ``loads_locally`` for the check."""
        return {}

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        try:
            params = self.typed_parameters(cleaned)
        except self.PARAMETER_ERRORS as error:
            raise forms.ValidationError({"parameters": str(error)}) from None
        try:
            reference_check(
                model_ref=cleaned.get("model_ref", ""),
                queue=cleaned.get("queue", ""),
                trust_remote_code=bool(cleaned.get("trust_remote_code")),
                **self.reference_needs(cleaned, params),
            )
        except ModelRefError as error:
            raise forms.ValidationError({error.field: str(error)}) from None
        return cleaned


class ModelReferenceAdmin(admin.ModelAdmin):
    """The admin of a model reference (a scorer, a policy): found by name, model or
    project, its project and creator picked by id."""

    list_display = ["name", "project", "queue", "model_ref", "created_at"]
    list_filter = ["queue"]
    search_fields = ["name", "model_ref", "project__slug"]
    list_select_related = ["project"]
    raw_id_fields = ["project", "created_by"]
    readonly_fields = ["created_at", "updated_at"]


class ScorerForm(ModelReferenceForm):
    PARAMETER_ERRORS = (prm.ScorerError,)

    class Meta:
        model = Scorer
        fields = ["project", "name", "kind", *ModelReferenceForm.REFERENCE_FIELDS[2:]]

    def typed_parameters(self, cleaned: dict[str, Any]) -> Any:
        return prm.params_for_kind(cleaned.get("kind", ""), cleaned.get("parameters") or {})

    def reference_needs(self, cleaned: dict[str, Any], params: Any) -> dict[str, Any]:
        kind = prm.kind_get(cleaned.get("kind", ""))
        return {"needs_model": kind.needs_model, "loads_locally": kind.loads(params)}


@admin.register(Scorer)
class ScorerAdmin(ModelReferenceAdmin):
    form = ScorerForm
    list_display = ["name", "revision", "kind", "project", "queue", "model_ref", "created_at"]
    list_filter = ["kind", "queue"]
    readonly_fields = ["artifact", "created_at", "updated_at"]


@admin.register(ScoringRun)
class ScoringRunAdmin(BigTableAdmin):
    list_display = ["id", "kind", "project", "scorer", "status", "done", "total", "created_at"]
    list_filter = ["kind", "status"]
    search_fields = ["=id", "project__slug", "scorer__name"]
    list_select_related = ["project", "scorer"]
    raw_id_fields = ["project", "scorer", "created_by"]
    readonly_fields = ["created_at", "started_at", "finished_at"]
    changelist_defer = ("selection", "parameters", "metrics", "error")


@admin.register(StepScore)
class StepScoreAdmin(BigTableAdmin):
    list_display = ["id", "step", "scorer", "value", "run", "updated_at"]
    list_filter = ["scorer"]
    search_fields = ["=step__id", "=step__trajectory__id"]
    list_select_related = ["scorer"]
    raw_id_fields = ["step", "scorer", "run"]
    changelist_defer = ("raw",)


@admin.register(AttributionRun)
class AttributionRunAdmin(BigTableAdmin):
    list_display = ["id", "method", "project", "scorer", "status", "done", "total", "created_at"]
    list_filter = ["method", "status"]
    search_fields = ["=id", "project__slug", "scorer__name", "label_source"]
    list_select_related = ["project", "scorer"]
    raw_id_fields = ["project", "scorer", "created_by"]
    readonly_fields = ["key", "created_at", "started_at", "finished_at"]
    changelist_defer = ("selection", "parameters", "metrics", "error")


@admin.register(StepCredit)
class StepCreditAdmin(BigTableAdmin):
    list_display = ["id", "step", "run", "value", "level"]
    search_fields = ["=step__id", "=run__id"]
    raw_id_fields = ["step", "run"]
    changelist_defer = ("detail",)


@admin.register(JudgePrompt)
class JudgePromptAdmin(admin.ModelAdmin):
    """Prompt versions are never edited: a change is a new version (the API's
    ``scorers/{id}/prompts/``), so the admin only shows them."""

    list_display = ["scorer", "version", "note", "created_at"]
    raw_id_fields = ["scorer", "created_by"]

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(JudgeReply)
class JudgeReplyAdmin(BigTableAdmin):
    list_display = ["id", "run", "key", "verdict", "parse_error", "created_at"]
    search_fields = ["=run__id"]
    raw_id_fields = ["run", "scorer", "prompt", "trajectory", "step"]

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False
