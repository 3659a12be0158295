"""Export endpoints: queue an export, follow it, download its files. Querysets start
from the user's projects, so anything outside them is a 404, as on the pages."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, cast

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import FileResponse
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import DefaultRouter
from rest_framework.views import APIView

from exports import services
from exports.models import BatchVersion, ExportBatch, ExportJob
from exports.selectors import (
    batch_diff,
    batch_get_for_user,
    batch_version_get,
    batch_versions,
    batches_for_project,
)
from exports.serializers import ExportJobSerializer, ExportRequestSerializer
from stepscope.jobs.api import JobViewSet
from stepscope.pagination import ByIdCursor
from trajectories.selectors import (
    can_download_exports,
    can_manage_data,
    project_get_for_user,
    projects_for_user,
    projects_hiding_exports,
)


@extend_schema_view(
    list=extend_schema(
        parameters=[OpenApiParameter("project", str, description="A project's slug.")]
    )
)
class ExportViewSet(mixins.RetrieveModelMixin, mixins.ListModelMixin, JobViewSet):
    """``POST`` queues an export (202); ``GET /exports/?project=SLUG`` lists one project's
    exports; ``GET /exports/{id}/`` reports progress, files and
    the manifest; ``GET /exports/{id}/files/{name}/`` downloads one file."""

    # (The docstring is every route's description in the OpenAPI schema, kept as it was.)
    # ``POST /exports/{id}/cancel/`` (JobViewSet) stops a queued or running export, as its
    # page's Cancel does: researchers and admins; nothing of it is published.

    serializer_class = ExportJobSerializer
    pagination_class = ByIdCursor

    def get_queryset(self) -> QuerySet[ExportJob]:
        queryset = ExportJob.objects.filter(
            project__in=projects_for_user(self.request.user)
        ).select_related("project", "batch", "batch_version")
        slug = self.request.query_params.get("project")
        if slug and self.action == "list":
            # A project the user is not in (or none of that name) is a 404, as elsewhere.
            queryset = queryset.filter(project=project_get_for_user(self.request.user, slug))
        return queryset

    def get_serializer_context(self) -> dict[str, Any]:
        # The manifest holds the label distributions and the annotators: withheld, like
        # the files, where the project hides labels or scores from the user's role.
        context = super().get_serializer_context()
        context["manifest_hidden"] = projects_hiding_exports(self.request.user)
        return context

    @extend_schema(request=ExportRequestSerializer, responses=ExportJobSerializer)
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        incoming = ExportRequestSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = dict(incoming.validated_data)
        project = project_get_for_user(request.user, data.pop("project"))
        batch = data.pop("batch")
        if not can_manage_data(request.user, project):
            raise PermissionDenied("Only researchers and admins export data.")
        if batch:
            try:
                services.batch_name_check(batch)
            except ValueError as error:
                raise ValidationError({"batch": str(error)}) from None
        try:
            plan = services.export_plan_build(project=project, **data)
        except (ValueError, TypeError) as error:
            raise ValidationError({"detail": str(error)}) from None
        job = services.export_start(plan=plan, user=cast(User, request.user), batch=batch)
        return Response(ExportJobSerializer(job).data, status=202)

    def may_cancel(self, user: Any, job: ExportJob) -> bool:
        return can_manage_data(user, job.project)

    def job_cancel(self, job: ExportJob) -> ExportJob:
        return services.export_cancel(job=job)

    @action(detail=True, methods=["get"], url_path=r"files/(?P<name>[^/]+)")
    def download(self, request: Request, pk: str, name: str, **kwargs: Any) -> FileResponse:
        job = self.get_object()
        if not can_download_exports(request.user, job.project):
            raise PermissionDenied("This project hides labels or model scores from annotators.")
        names = {f["name"] for f in job.files} | {"manifest.json"}
        if job.status != ExportJob.Status.DONE or name not in names:
            raise NotFound("No such file in this export.")
        path = Path(job.out_dir) / name
        if not path.is_file():
            raise NotFound("The file is gone.")
        return FileResponse(path.open("rb"), as_attachment=True, filename=name)


class BatchParams:
    """The query parameters of the batch endpoints: ``project`` (a slug) is required, and
    a parameter an endpoint does not take is refused by name rather than ignored."""

    def __init__(self, request: Request, *allowed: str) -> None:
        given = set(request.query_params) - {"format"}
        unknown = sorted(given - {"project", *allowed})
        if unknown:
            raise ValidationError({name: ["unknown parameter"] for name in unknown})
        slug = request.query_params.get("project", "")
        if not slug:
            raise ValidationError({"project": ["required: the batch's project (a slug)"]})
        self.request = request
        self.slug = slug

    def batch(self, name: str) -> ExportBatch:
        """The batch; 404 outside the user's projects, as everywhere."""
        return batch_get_for_user(self.request.user, self.slug, name)

    def number(self, name: str) -> int | None:
        """A version number parameter (``latest`` or absent: None, the newest)."""
        raw = self.request.query_params.get(name, "latest")
        if raw == "latest":
            return None
        if not raw.isdigit() or int(raw) < 1:
            raise ValidationError({name: [f"expected a version number or latest, got {raw!r}"]})
        return int(raw)


_PROJECT = OpenApiParameter("project", str, required=True, description="A project's slug.")


def batch_json(batch: ExportBatch, versions: list[BatchVersion]) -> dict[str, Any]:
    return {
        "name": batch.name,
        "project": batch.project.slug,
        "created_at": batch.created_at,
        "versions": [
            {
                "version": v.number,
                "ref": f"{batch.name}@{v.number}",
                "export": v.export_id,
                "format": v.export.format,
                "label_source": v.export.label_source,
                "trajectories": v.trajectories,
                "labels": v.labels,
                "rows": v.export.row_count,
                "created_at": v.created_at,
            }
            for v in versions
        ],
    }


def version_json(request: Request, version: BatchVersion) -> dict[str, Any]:
    """A version: its export's files (each with the address that downloads it) and its
    manifest, withheld (null) like the export's own where the project hides labels or
    scores from the user's role."""
    batch, job = version.batch, version.export
    hidden = not can_download_exports(request.user, batch.project)
    return {
        "batch": batch.name,
        "project": batch.project.slug,
        "version": version.number,
        "ref": f"{batch.name}@{version.number}",
        "export": job.pk,
        "format": job.format,
        "container": job.container,
        "label_source": job.label_source,
        "trajectories": version.trajectories,
        "labels": version.labels,
        "created_at": version.created_at,
        "files": [
            {
                **file,
                "url": request.build_absolute_uri(
                    f"/api/v1/exports/{job.pk}/files/{file['name']}/"
                ),
            }
            for file in job.files
        ],
        "manifest": None if hidden else job.manifest,
    }


class BatchList(APIView):
    """``GET /batches/?project=SLUG``: the project's batches, each with its versions."""

    @extend_schema(
        parameters=[_PROJECT], responses={200: list[dict[str, Any]]}, operation_id="batches_list"
    )
    def get(self, request: Request) -> Response:
        params = BatchParams(request)
        project = project_get_for_user(request.user, params.slug)
        return Response(
            [batch_json(batch, batch_versions(batch)) for batch in batches_for_project(project)]
        )


class BatchDetail(APIView):
    """``GET /batches/{name}/?project=SLUG``: a batch and its versions, newest first."""

    @extend_schema(parameters=[_PROJECT], responses={200: dict}, operation_id="batches_retrieve")
    def get(self, request: Request, name: str) -> Response:
        batch = BatchParams(request).batch(name)
        return Response(batch_json(batch, batch_versions(batch)))


class BatchVersionDetail(APIView):
    """``GET /batches/{name}/versions/{n}/?project=SLUG``: version ``n`` (or ``latest``),
    its files and manifest: what a training job pins as ``name@n``."""

    @extend_schema(
        parameters=[_PROJECT], responses={200: dict}, operation_id="batches_versions_retrieve"
    )
    def get(self, request: Request, name: str, number: str) -> Response:
        batch = BatchParams(request).batch(name)
        if number != "latest" and not number.isdigit():
            raise NotFound(f"No version {number!r}: a number or latest.")
        version = batch_version_get(batch, None if number == "latest" else int(number))
        return Response(version_json(request, version))


class BatchDiffView(APIView):
    """``GET /batches/{name}/diff/?project=SLUG&from=1&to=2``: what changed between two
    versions (trajectories and, on those in both, step labels: added, removed,
    changed). The labels are those the versions hold: researchers and admins, and
    annotators where the project does not hide labels or scores from them."""

    @extend_schema(
        responses={200: dict},
        operation_id="batches_diff_retrieve",
        parameters=[
            _PROJECT,
            OpenApiParameter(
                "from", str, description="A version number (default: the one before to)."
            ),
            OpenApiParameter("to", str, description="A version number or latest (the default)."),
            OpenApiParameter("limit", int, description="How many changes of each kind to list."),
        ],
    )
    def get(self, request: Request, name: str) -> Response:
        params = BatchParams(request, "from", "to", "limit")
        batch = params.batch(name)
        if not can_download_exports(request.user, batch.project):
            raise PermissionDenied("This project hides labels or model scores from annotators.")
        after = batch_version_get(batch, params.number("to"))
        before_number = params.number("from") if "from" in request.query_params else None
        if before_number is None:
            before_number = max(after.number - 1, 1)
        before = batch_version_get(batch, before_number)
        limit = request.query_params.get("limit", "200")
        if not limit.isdigit() or int(limit) > DIFF_LIMIT_MAX:
            raise ValidationError({"limit": [f"expected 0 to {DIFF_LIMIT_MAX}, got {limit!r}"]})
        diff = batch_diff(before, after, limit=int(limit))
        return Response(
            {
                "batch": batch.name,
                "from": before.number,
                "to": after.number,
                "counts": diff.counts,
                "trajectories": [dataclasses.asdict(c) for c in diff.trajectories],
                "labels": [dataclasses.asdict(c) for c in diff.labels],
                "limit": diff.limit,
            }
        )


DIFF_LIMIT_MAX = 10_000


# A DefaultRouter for the format suffixes (``exports.json``) the routes had in trajectories;
# the API root listing them is stepscope/api_urls.py's.
router = DefaultRouter()
router.include_root_view = False
router.register("exports", ExportViewSet, basename="export")

urlpatterns: list[URLPattern | URLResolver] = [
    path("", include(router.urls)),
    path("batches/", BatchList.as_view(), name="api-batch-list"),
    path("batches/<slug:name>/", BatchDetail.as_view(), name="api-batch-detail"),
    path("batches/<slug:name>/diff/", BatchDiffView.as_view(), name="api-batch-diff"),
    path(
        "batches/<slug:name>/versions/<str:number>/",
        BatchVersionDetail.as_view(),
        name="api-batch-version",
    ),
]
