from __future__ import annotations

from rest_framework import serializers

from stepscope.serializers import StrictSerializer


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


class AlignmentParamsSerializer(serializers.Serializer[dict[str, object]]):
    """The query parameters of ``GET /api/v1/scorers/<id>/alignment/``."""

    project = serializers.SlugField(
        required=False,
        default="",
        allow_blank=True,
        help_text="needed for a scorer offered to every project; else the scorer's own",
    )
    # The metaclass takes declared fields off the class, so this does not shadow
    # ``Field.source`` at run time; mypy sees only the class attribute.
    source = serializers.CharField(  # type: ignore[assignment]
        required=False,
        default="",
        allow_blank=True,
        max_length=300,
        help_text="e.g. human:majority",
    )
    decisive = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        max_length=300,
        help_text="a human decisive-failure source, e.g. import:who-and-when",
    )


class RubricAlignmentParamsSerializer(StrictSerializer):
    """The query parameters of ``GET /api/v1/projects/<slug>/rubric-alignment/``; any
    other is refused, named."""

    a = serializers.CharField(max_length=300, help_text="e.g. rubric:human:majority")
    b = serializers.CharField(max_length=300, help_text="e.g. rubric:judge:<scorer>")
    rubric = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        max_length=100,
        help_text="the rubric's name (default: the project's one current rubric)",
    )
    version = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        min_value=1,
        help_text="the rubric version whose marks are compared (default: the current one)",
    )
