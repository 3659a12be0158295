"""Django admin for label schemas and step labels."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from labeling.models import (
    FinalLabel,
    LabelSchema,
    Queue,
    QueueAssignment,
    StepLabel,
    StepLabelEvent,
    TrajectoryLabel,
)
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


@admin.register(TrajectoryLabel)
class TrajectoryLabelAdmin(admin.ModelAdmin):
    list_display = ["id", "trajectory", "annotator", "status", "finish_reason", "flagged"]
    list_filter = ["status", "finish_reason", "flagged", "outcome"]
    search_fields = ["=trajectory__id", "annotator__username"]
    list_select_related = ["trajectory", "annotator"]
    raw_id_fields = ["trajectory", "annotator"]


@admin.register(FinalLabel)
class FinalLabelAdmin(admin.ModelAdmin):
    list_display = ["id", "step", "schema", "value", "adjudicator", "updated_at"]
    list_select_related = ["step", "schema", "adjudicator"]
    raw_id_fields = ["step", "schema", "adjudicator"]


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    list_display = ["name", "project", "overlap", "lease_seconds", "is_active", "created_at"]
    list_filter = ["is_active", "project"]
    search_fields = ["name", "project__slug"]
    raw_id_fields = ["project", "created_by"]
    filter_horizontal = ["assignees"]


@admin.register(QueueAssignment)
class QueueAssignmentAdmin(admin.ModelAdmin):
    list_display = ["id", "item", "annotator", "status", "leased_at", "expires_at"]
    list_filter = ["status"]
    search_fields = ["annotator__username", "=item__trajectory__id"]
    raw_id_fields = ["item", "annotator"]


@admin.register(StepLabelEvent)
class StepLabelEventAdmin(admin.ModelAdmin):
    """The label history, read-only: it is the record of what annotators did."""

    list_display = ["pgh_id", "pgh_created_at", "pgh_label", "step", "annotator", "value"]
    list_filter = ["pgh_label"]
    search_fields = ["=step__id", "annotator__username"]
    raw_id_fields = ["step", "annotator", "schema", "pgh_obj"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
