from __future__ import annotations

from rest_framework import serializers


class CompareParamsSerializer(serializers.Serializer[dict[str, object]]):
    """The query parameters of ``GET /api/v1/compare/``, as ``manage.py compare`` takes
    them."""

    project = serializers.SlugField()
    scorer = serializers.CharField(max_length=100)
    labels = serializers.CharField(required=False, default="human:majority", max_length=300)
    threshold = serializers.FloatField(required=False, default=0.5, min_value=0, max_value=1)
    slice = serializers.CharField(required=False, default="", allow_blank=True, max_length=500)
    by = serializers.ChoiceField(
        required=False,
        default="",
        allow_blank=True,
        choices=["model", "format", "task", "length", "kind", "annotator"],
    )
    humans = serializers.BooleanField(required=False, default=False)


class DecisiveParamsSerializer(serializers.Serializer[dict[str, object]]):
    """The query parameters of ``GET /api/v1/compare/decisive/``."""

    project = serializers.SlugField()
    reference = serializers.CharField(max_length=300, help_text="e.g. import:mapped")
    candidate = serializers.CharField(
        max_length=300, help_text="model:<scorer> or human:<username>"
    )
    k = serializers.IntegerField(required=False, default=1, min_value=0, max_value=50)
