"""Export endpoints: queue an export, follow it, download its files. Querysets start
from the user's projects, so anything outside them is a 404, as on the pages."""

from __future__ import annotations

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

from exports import services
from exports.models import ExportJob
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
        ).select_related("project")
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
        if not can_manage_data(request.user, project):
            raise PermissionDenied("Only researchers and admins export data.")
        try:
            plan = services.export_plan_build(project=project, **data)
        except (ValueError, TypeError) as error:
            raise ValidationError({"detail": str(error)}) from None
        job = services.export_start(plan=plan, user=cast(User, request.user))
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


# A DefaultRouter for the format suffixes (``exports.json``) the routes had in trajectories;
# the API root listing them is stepscope/api_urls.py's.
router = DefaultRouter()
router.include_root_view = False
router.register("exports", ExportViewSet, basename="export")

urlpatterns: list[URLPattern | URLResolver] = [path("", include(router.urls))]
