"""Django admin for policies (where admins register generation models), rollout jobs and
Monte Carlo values."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from rollouts import generation
from rollouts.models import Policy, RolloutJob, StepMC
from rollouts.services.policies import POLICY_NEEDS_MODEL
from scoring.admin import ModelReferenceAdmin, ModelReferenceForm
from trajectories.admin import BigTableAdmin


class PolicyForm(ModelReferenceForm):
    PARAMETER_ERRORS = (generation.PolicyError,)

    class Meta:
        model = Policy
        fields = list(ModelReferenceForm.REFERENCE_FIELDS)

    def typed_parameters(self, cleaned: dict[str, Any]) -> Any:
        return generation.policy_params(cleaned.get("parameters") or {})

    def reference_needs(self, cleaned: dict[str, Any], params: Any) -> dict[str, Any]:
        return {"needs_model": POLICY_NEEDS_MODEL}


@admin.register(Policy)
class PolicyAdmin(ModelReferenceAdmin):
    form = PolicyForm


@admin.register(RolloutJob)
class RolloutJobAdmin(BigTableAdmin):
    list_display = ["id", "mode", "project", "policy", "k", "status", "done", "total", "created_at"]
    list_filter = ["mode", "status"]
    search_fields = ["=id", "project__slug", "policy__name"]
    list_select_related = ["project", "policy"]
    raw_id_fields = ["project", "policy", "created_by"]
    readonly_fields = ["created_at", "started_at", "finished_at"]
    changelist_defer = ("selection", "options", "result", "error")


@admin.register(StepMC)
class StepMCAdmin(BigTableAdmin):
    list_display = ["id", "step", "policy", "k", "successes", "soft", "hard", "updated_at"]
    list_filter = ["policy"]
    search_fields = ["=step__id", "=step__trajectory__id"]
    list_select_related = ["policy"]
    raw_id_fields = ["step", "policy", "job"]
