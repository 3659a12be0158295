"""Django admin for projects, members, imports, trajectories and steps. The steps and
trajectories tables grow large: foreign keys use raw id inputs, list pages skip the full
count, and list queries leave large text and JSON columns out."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from trajectories.models import (
    ImportBatch,
    Membership,
    Project,
    Step,
    Trajectory,
    TrajectorySource,
)


class BigTableAdmin(admin.ModelAdmin):
    """An admin whose change list leaves out the columns named in ``changelist_defer``
    (large text and JSON, also on joined rows); the change form still loads them all."""

    changelist_defer: tuple[str, ...] = ()
    show_full_result_count = False

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset = super().get_queryset(request)
        match = request.resolver_match
        if self.changelist_defer and match and (match.url_name or "").endswith("_changelist"):
            queryset = queryset.defer(*self.changelist_defer)
        return queryset


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ["user"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "project", "role"]
    list_filter = ["role", "project"]
    search_fields = ["user__username", "project__name", "project__slug"]
    list_select_related = ["user", "project"]
    raw_id_fields = ["user", "project"]


@admin.register(ImportBatch)
class ImportBatchAdmin(BigTableAdmin):
    list_display = [
        "file_name",
        "project",
        "source_format",
        "status",
        "created_count",
        "unchanged_count",
        "rejected_count",
        "step_count",
        "created_at",
    ]
    list_filter = ["status", "source_format", "project"]
    search_fields = ["file_name"]
    list_select_related = ["project"]
    raw_id_fields = ["project", "created_by"]
    date_hierarchy = "created_at"
    changelist_defer = ("errors",)


@admin.register(Trajectory)
class TrajectoryAdmin(BigTableAdmin):
    list_display = [
        "id",
        "external_id",
        "project",
        "model_name",
        "source_format",
        "step_count",
        "success",
        "outcome_reward",
        "created_at",
    ]
    list_filter = ["success", "source_format", "project"]
    search_fields = ["=id", "external_id", "task_key", "model_name"]
    list_select_related = ["project"]
    raw_id_fields = ["project", "import_batch", "parent"]
    readonly_fields = ["content_hash", "created_at"]
    changelist_defer = ("task", "ground_truth", "metadata")


@admin.register(TrajectorySource)
class TrajectorySourceAdmin(BigTableAdmin):
    list_display = ["trajectory", "location"]
    search_fields = ["=trajectory__id", "=trajectory__external_id"]
    list_select_related = ["trajectory"]
    raw_id_fields = ["trajectory"]
    changelist_defer = (
        "raw",
        "trajectory__task",
        "trajectory__ground_truth",
        "trajectory__metadata",
    )


@admin.register(Step)
class StepAdmin(BigTableAdmin):
    list_display = ["id", "trajectory", "index", "kind", "role", "agent", "tool_name", "labelable"]
    list_filter = ["kind", "labelable", "role"]
    # Exact lookups only: a substring search over step content would scan the whole table.
    search_fields = ["=id", "=trajectory__id", "=trajectory__external_id", "=tool_name"]
    list_select_related = ["trajectory"]
    raw_id_fields = ["trajectory"]
    readonly_fields = ["prefix_hash"]
    changelist_defer = (
        "content",
        "metadata",
        "tool_args",
        "trajectory__task",
        "trajectory__ground_truth",
        "trajectory__metadata",
    )
