"""Django admin for label and span schemas, step labels, spans and final spans."""

from __future__ import annotations

from typing import Any

from django import forms
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
from labeling.spans import FinalSpan, SpanLabel, SpanSchema
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


class SpanSchemaForm(forms.ModelForm):
    """The model's own check of the values (``SpanSchema.clean``), and, as the span schema
    page, no value taken away while spans carry it."""

    class Meta:
        model = SpanSchema
        fields = ["project", "name", "values", "is_active"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        values = cleaned.get("values")
        if self.instance.pk and isinstance(values, list):
            kept = {entry.get("value") for entry in values if isinstance(entry, dict)}
            used = sorted(
                set(
                    SpanLabel.objects.filter(schema=self.instance)
                    .exclude(value__in=kept)
                    .values_list("value", flat=True)
                )
                | set(
                    FinalSpan.objects.filter(schema=self.instance)
                    .exclude(value__in=kept)
                    .values_list("value", flat=True)
                )
            )
            if used:
                self.add_error(
                    "values",
                    f"Spans carry {', '.join(used)}; keep the value or remove those spans first.",
                )
        return cleaned


@admin.register(SpanSchema)
class SpanSchemaAdmin(admin.ModelAdmin):
    form = SpanSchemaForm
    list_display = ["name", "project", "is_active", "created_at"]
    list_filter = ["is_active", "project"]
    search_fields = ["name", "project__name", "project__slug"]
    list_select_related = ["project"]
    raw_id_fields = ["project"]


@admin.register(SpanLabel)
class SpanLabelAdmin(admin.ModelAdmin):
    list_display = ["id", "trajectory", "schema", "start_index", "end_index", "value", "annotator"]
    list_filter = ["schema"]
    search_fields = ["=trajectory__id", "annotator__username", "value"]
    list_select_related = ["trajectory", "schema", "annotator"]
    raw_id_fields = ["trajectory", "schema", "annotator"]


@admin.register(FinalSpan)
class FinalSpanAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "trajectory",
        "schema",
        "start_index",
        "end_index",
        "value",
        "adjudicator",
    ]
    list_select_related = ["trajectory", "schema", "adjudicator"]
    raw_id_fields = ["trajectory", "schema", "adjudicator"]
