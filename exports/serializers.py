from __future__ import annotations

from typing import Any

from rest_framework import serializers

from exports.models import BatchVersion, ExportBatch, ExportJob
from trajectories.models import Project


class ExportJobSerializer(serializers.ModelSerializer[ExportJob]):
    project = serializers.SlugRelatedField[Project](slug_field="slug", read_only=True)
    batch = serializers.SlugRelatedField[ExportBatch](slug_field="name", read_only=True)
    batch_version = serializers.SerializerMethodField()

    class Meta:
        model = ExportJob
        fields = [
            "id",
            "project",
            "format",
            "container",
            "compress",
            "label_source",
            "neutral",
            "selection_name",
            "selection",
            "split",
            "seed",
            "status",
            "done",
            "total",
            "files",
            "row_count",
            "error",
            "manifest",
            "batch",
            "batch_version",
            "created_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_batch_version(self, instance: ExportJob) -> int | None:
        """The version of its batch the export became (null: none, or not yet)."""
        if instance.batch_id is None:
            return None
        try:
            return instance.batch_version.number  # select_related by the list
        except BatchVersion.DoesNotExist:
            return None

    def to_representation(self, instance: ExportJob) -> dict[str, Any]:
        """The job; its manifest null for a reader of a project that hides labels or
        scores from them (the view names those projects in ``manifest_hidden``)."""
        data: dict[str, Any] = super().to_representation(instance)
        if instance.project_id in self.context.get("manifest_hidden", ()):
            data["manifest"] = None
        return data


class ExportRequestSerializer(serializers.Serializer[dict[str, object]]):
    project = serializers.SlugField()
    format = serializers.CharField()
    labels = serializers.CharField()
    neutral = serializers.ChoiceField(choices=["positive", "negative", "drop", "keep"])
    selection = serializers.CharField(required=False, default="", allow_blank=True)
    split = serializers.CharField(required=False, default="", allow_blank=True)
    seed = serializers.IntegerField(required=False, default=0)
    container = serializers.CharField(required=False, default="", allow_blank=True)
    compress = serializers.BooleanField(required=False, default=False)
    threshold = serializers.FloatField(required=False, default=0.5, min_value=0, max_value=1)
    scorer = serializers.CharField(required=False, default="", allow_blank=True)
    credit_run = serializers.IntegerField(required=False, default=None, allow_null=True)
    options = serializers.DictField(required=False, default=dict)
    batch = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        help_text="A batch of the project (made if new): the export becomes its next version.",
    )
