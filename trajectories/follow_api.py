"""``/api/v1/projects/{slug}/follow-sources/``: the followed folders page as an API, for
the project's admins, through the same services and rules (inside
``STEPSCOPE_FOLLOW_ROOTS`` once links are resolved, a format that can be followed, a
folder not followed twice). Each source says how far each of its files got, so a
trainer's script can wait for its files to be in. Outsiders get 404, other members 403;
writes are POSTs, as everywhere in the API."""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from stepscope.serializers import StrictSerializer
from trajectories import selectors
from trajectories.forms import FOLLOWABLE_FORMAT_CHOICES
from trajectories.models import FollowedFile, FollowSource, Project
from trajectories.services.follow import FollowRefused, follow_source_add, follow_source_remove

# What only a project admin may do here (the 403 says it).
ADMINS_DO = "choose the folders a project follows"


class FollowedFileSerializer(serializers.ModelSerializer[FollowedFile]):
    class Meta:
        model = FollowedFile
        fields = [
            "path",
            "imported_bytes",
            "imported_lines",
            "seen_size",
            "trajectories",
            "error",
            "updated_at",
        ]
        read_only_fields = fields


class FollowSourceSerializer(serializers.ModelSerializer[FollowSource]):
    files = serializers.SerializerMethodField()

    class Meta:
        model = FollowSource
        fields = [
            "id",
            "path",
            "source_format",
            "skip_invalid",
            "by_worker",
            "created_at",
            "last_pass_at",
            "last_error",
            "files",
        ]
        read_only_fields = fields

    def get_files(self, source: FollowSource) -> list[dict[str, Any]]:
        # In path order, as prefetched by _sources: one query for every source's files.
        return list(FollowedFileSerializer(source.files.all(), many=True).data)


class FollowSourceAddSerializer(StrictSerializer):
    path = serializers.CharField(max_length=1000)
    source_format = serializers.ChoiceField(choices=FOLLOWABLE_FORMAT_CHOICES)
    skip_invalid = serializers.BooleanField(default=False)


def _sources(project: Project) -> Any:
    files = Prefetch("files", queryset=FollowedFile.objects.order_by("path"))
    return FollowSource.objects.filter(project=project).prefetch_related(files)


@extend_schema(
    request=FollowSourceAddSerializer,
    responses={200: FollowSourceSerializer(many=True), 201: FollowSourceSerializer},
)
@api_view(["GET", "POST"])
def follow_source_list(request: Request, slug: str) -> Response:
    """The folders the project follows, each with its files; ``POST {"path",
    "source_format", "skip_invalid"}`` has the worker follow one more (400 naming the
    field when it may not: outside the server's roots, not a folder, followed already)."""
    project = selectors.project_get_for_admin(request.user, slug, does=ADMINS_DO)
    if request.method == "GET":
        return Response(FollowSourceSerializer(_sources(project), many=True).data)
    incoming = FollowSourceAddSerializer(data=request.data)
    incoming.is_valid(raise_exception=True)
    try:
        source = follow_source_add(project=project, **incoming.validated_data)
    except FollowRefused as refused:
        raise ValidationError({refused.field: [refused.message]}) from None
    return Response(FollowSourceSerializer(source).data, status=201)


@extend_schema(responses=FollowSourceSerializer)
@api_view(["GET"])
def follow_source_detail(request: Request, slug: str, pk: int) -> Response:
    """One followed folder: when the worker last looked, and how far each file got."""
    project = selectors.project_get_for_admin(request.user, slug, does=ADMINS_DO)
    return Response(FollowSourceSerializer(get_object_or_404(_sources(project), pk=pk)).data)


@extend_schema(request=None, responses={204: None})
@api_view(["POST"])
def follow_source_remove_view(request: Request, slug: str, pk: int) -> Response:
    """Stop following the folder; what was imported from it stays."""
    project = selectors.project_get_for_admin(request.user, slug, does=ADMINS_DO)
    follow_source_remove(source=get_object_or_404(FollowSource, pk=pk, project=project))
    return Response(status=204)


urlpatterns: list[URLPattern] = [
    path(
        "projects/<slug:slug>/follow-sources/",
        follow_source_list,
        name="api-follow-source-list",
    ),
    path(
        "projects/<slug:slug>/follow-sources/<int:pk>/",
        follow_source_detail,
        name="api-follow-source-detail",
    ),
    path(
        "projects/<slug:slug>/follow-sources/<int:pk>/remove/",
        follow_source_remove_view,
        name="api-follow-source-remove",
    ),
]
