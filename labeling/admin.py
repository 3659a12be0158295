"""Django admin for label schemas and step labels."""

from __future__ import annotations

from django.contrib import admin

from labeling.models import LabelSchema, StepLabel
from trajectories.admin import BigTableAdmin


@admin.register(LabelSchema)
class LabelSchemaAdmin(admin.ModelAdmin):
    list_display = ["name", "project", "kind", "version", "is_active", "first_error_mode"]
    list_filter = ["kind", "is_active", "project"]
    search_fields = ["name", "project__name", "project__slug"]
    list_select_related = ["project"]
    raw_id_fields = ["project"]


@admin.register(StepLabel)
class StepLabelAdmin(BigTableAdmin):
    list_display = ["id", "step", "annotator", "schema", "value", "status", "created_at"]
    list_filter = ["status", "value", "schema", "saw_model_scores"]
    search_fields = ["=step__id", "=step__trajectory__id", "annotator__username"]
    list_select_related = ["step", "annotator", "schema"]
    raw_id_fields = ["step", "annotator", "schema"]
    readonly_fields = ["created_at", "updated_at"]
    date_hierarchy = "created_at"
    changelist_defer = ("rationale", "step__content", "step__metadata", "step__tool_args")
