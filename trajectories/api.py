"""Read endpoints for projects, trajectories and steps. Querysets start from the
user's projects, so anything outside them is a 404, as on the pages."""

from __future__ import annotations

import io
from typing import Any, cast

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, pagination, viewsets
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import DefaultRouter
from rest_framework.throttling import BaseThrottle

from stepscope.jobs.api import JobViewSet
from stepscope.pagination import ByIdCursor
from stepscope.parsers import JSONParser
from stepscope.throttling import BULK_THROTTLES
from trajectories import services
from trajectories.columns import trajectory_list_columns
from trajectories.follow_api import urlpatterns as follow_urls
from trajectories.formats import stepscope_typed
from trajectories.members_api import urlpatterns as members_urls
from trajectories.models import (
    ImportBatch,
    Membership,
    Project,
    ProjectDeletion,
    Step,
    Trajectory,
)
from trajectories.selection import (
    FILTERS,
    SelectionError,
    selection_parse,
    selection_refused_to_blind,
)
from trajectories.selectors import (
    SELECTION_RANK,
    can_manage_data,
    list_ordering_parse,
    list_sort_key,
    membership_role,
    project_get_for_user,
    projects_for_user,
    role_downloads_exports,
    trajectories_filtered,
)
from trajectories.serializers import (
    ImportBatchSerializer,
    ImportRequestSerializer,
    ProjectDeleteSerializer,
    ProjectDeletionSerializer,
    ProjectSerializer,
    StepSerializer,
    TrajectorySerializer,
)


class ProjectViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    """``POST`` creates a project (name, slug, guidelines) with its creator as admin, for
    whoever ``STEPSCOPE_PROJECT_CREATORS`` allows; a taken slug is a 400 on ``slug``.
    Its admins ``PATCH`` the name and guidelines, and ``DELETE`` it with ``{"confirm":
    "<slug>"}``: the project is hidden at once and removed by a worker (202, with the
    deletion to follow at ``/project-deletions/{id}/``)."""

    serializer_class = ProjectSerializer
    lookup_field = "slug"
    pagination_class = None
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[Project]:
        return projects_for_user(self.request.user).order_by("name")

    def perform_create(self, serializer: Any) -> None:
        if not services.project_creation_allowed(self.request.user):
            raise PermissionDenied("Only staff create projects here.")
        try:
            serializer.instance = services.project_create(
                owner=cast(User, self.request.user),
                slug=serializer.validated_data["slug"],
                name=serializer.validated_data["name"],
                guidelines=serializer.validated_data.get("guidelines", ""),
            )
        except services.SlugTaken as taken:  # taken since the serializer's check
            raise ValidationError({"slug": [taken.message]}) from None

    def _admin_project(self) -> Project:
        project = self.get_object()
        if membership_role(self.request.user, project) != Membership.Role.ADMIN:
            raise PermissionDenied("Only project admins change or delete a project.")
        return project

    def perform_update(self, serializer: Any) -> None:
        project = self._admin_project()
        data = serializer.validated_data
        if "slug" in data and data["slug"] != project.slug:
            raise ValidationError({"slug": ["A project's slug does not change."]})
        serializer.instance = services.project_update(
            project=project, name=data.get("name"), guidelines=data.get("guidelines")
        )

    @extend_schema(request=ProjectDeleteSerializer, responses={202: ProjectDeletionSerializer})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        project = self._admin_project()
        confirm = ProjectDeleteSerializer(data=request.data)
        confirm.is_valid(raise_exception=True)
        try:
            deletion = services.project_delete_start(
                project=project,
                actor=cast(User, request.user),
                confirm=confirm.validated_data["confirm"],
            )
        except services.DeletionRefused as refused:
            raise ValidationError({refused.field: [refused.message]}) from None
        return Response(ProjectDeletionSerializer(deletion).data, status=202)


class ProjectDeletionViewSet(mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """A deletion its starter follows: status, steps removed, rows removed by kind."""

    serializer_class = ProjectDeletionSerializer

    def get_queryset(self) -> QuerySet[ProjectDeletion]:
        return ProjectDeletion.objects.filter(created_by_id=self.request.user.pk)


class SortedCursor(ByIdCursor):
    """Newest first, or what the view sorted by (``cursor_ordering``)."""

    def get_ordering(self, request: Request, queryset: Any, view: Any) -> tuple[str, ...]:
        return getattr(view, "cursor_ordering", None) or ("-id",)


# The list's own parameters; every other name is a filter of the selection language.
LIST_PARAMETERS = ("project", "external_id", "cursor", "format", "ordering")


@extend_schema_view(
    list=extend_schema(
        parameters=[
            OpenApiParameter("project", str, description="A project's slug; filters need it."),
            OpenApiParameter("external_id", str),
            OpenApiParameter(
                "ordering",
                str,
                description="A column to sort by (steps, reward, cost, ...); -steps: descending.",
            ),
            *(
                OpenApiParameter(
                    name,
                    {str: str, int: int, float: float}[spec.kind],
                    description=spec.help,
                    enum=spec.choices or None,
                )
                for name, spec in FILTERS.items()
            ),
        ]
    )
)
class TrajectoryViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """``?project=SLUG`` narrows the list to one project; ``?external_id=`` finds one.
    With a project, every filter of the selection language applies, by the names the
    list page uses (``trajectories.selection``); a bad value or a name that is no filter
    is a 400 naming it. ``?ordering=steps`` (``-steps``: descending) sorts by any column
    of the list page (``list_ordering_parse``), empty values last."""

    serializer_class = TrajectorySerializer
    pagination_class = SortedCursor

    def get_queryset(self) -> QuerySet[Trajectory]:
        params = self.request.query_params
        if self.action != "list" or not params.get("project"):
            queryset = Trajectory.objects.filter(project__in=projects_for_user(self.request.user))
            if params.get("project"):
                queryset = queryset.filter(project__slug=params["project"])
            project = None
        else:
            project = project_get_for_user(self.request.user, params["project"])
        if self.action == "list":
            given = {
                name: values[0] if len(values) == 1 else values
                for name, values in params.lists()
                if name not in LIST_PARAMETERS
            }
            try:
                filters = selection_parse(given)
                if project is not None:
                    # The project's own query, its id a constant the planner sees: the
                    # (project, id) index serves the newest-first page (joined by slug,
                    # every trajectory of the project was read and sorted: 0.2 s at
                    # 58,000), and the filters apply without a second walk (pk IN).
                    blind = selection_refused_to_blind(
                        filters,
                        hidden=not role_downloads_exports(
                            membership_role(self.request.user, project), project
                        ),
                    )
                    if blind is not None:
                        raise blind
                    queryset = trajectories_filtered(project, filters)
                elif not filters.is_empty():
                    raise ValidationError({"project": ["Filters need a project (?project=SLUG)."]})
            except SelectionError as error:
                raise ValidationError(error.by_name()) from None
        queryset = queryset.select_related("project")
        if params.get("external_id"):
            queryset = queryset.filter(external_id=params["external_id"])
        if self.action == "list" and params.get("ordering"):
            queryset = self._sorted(queryset, project, params["ordering"])
        elif self.action == "list" and SELECTION_RANK in queryset.query.annotations:
            # Semantic search: nearest first.
            self.cursor_ordering = (SELECTION_RANK, "id")
        return queryset

    def _sorted(
        self, queryset: QuerySet[Trajectory], project: Project | None, text: str
    ) -> QuerySet[Trajectory]:
        """Sorted as the list page sorts (a column a member may not see does not sort);
        the cursor pages by the sorted value, then id."""
        columns = []
        if project is not None:
            columns = trajectory_list_columns(project, membership_role(self.request.user, project))
        try:
            ordering = list_ordering_parse(text, columns)
        except ValueError as error:
            raise ValidationError({"ordering": [str(error)]}) from None
        for column in columns:
            if column.name == ordering.name:
                queryset = queryset.annotate(**column.annotations(project))  # type: ignore[arg-type]
        sign = "-" if ordering.descending else ""
        self.cursor_ordering = (f"{sign}list_sort", f"{sign}id")
        return queryset.annotate(list_sort=list_sort_key(ordering))


class StepCursor(pagination.CursorPagination):
    ordering = ("trajectory_id", "index")
    page_size = 500


class StepViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """``?trajectory=ID`` lists one trajectory's steps in order."""

    serializer_class = StepSerializer
    pagination_class = StepCursor

    def get_queryset(self) -> QuerySet[Step]:
        queryset = Step.objects.filter(trajectory__project__in=projects_for_user(self.request.user))
        trajectory = self.request.query_params.get("trajectory")
        if trajectory:
            queryset = queryset.filter(
                trajectory_id=int(trajectory) if trajectory.isdigit() else -1
            )
        return queryset


class PushParser(JSONParser):
    """JSON as every endpoint reads it, except that a push the typed reader takes whole
    is decoded by it, from the bytes (:mod:`trajectories.formats.stepscope_typed`): its
    records arrive checked. Any other body is read the ordinary way."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        body = stream.read()
        typed = stepscope_typed.push_decode(body)
        if typed is None:
            return super().parse(io.BytesIO(body), media_type, parser_context)
        fields, records = typed
        return {**fields, "trajectories": records}


class ImportViewSet(mixins.RetrieveModelMixin, mixins.ListModelMixin, JobViewSet):
    """``POST`` a file (queued for a worker; 202) or a JSON list of trajectories in our
    format (imported at once; 201). ``GET /imports/{id}/`` reports status and errors;
    ``POST /imports/{id}/cancel/`` stops a queued or running import (nothing of it stays)."""

    serializer_class = ImportBatchSerializer
    pagination_class = ByIdCursor
    parser_classes = [PushParser, FormParser, MultiPartParser]

    def may_cancel(self, user: Any, job: Any) -> bool:
        return can_manage_data(user, job.project)

    def job_cancel(self, job: Any) -> Any:
        return services.import_batch_cancel(batch=job)

    def get_throttles(self) -> list[BaseThrottle]:
        # A push of many trajectories is one bulk write, not a stream of small calls.
        if self.action == "create":
            return [throttle() for throttle in BULK_THROTTLES]
        return super().get_throttles()

    def get_queryset(self) -> QuerySet[ImportBatch]:
        return ImportBatch.objects.filter(
            project__in=projects_for_user(self.request.user)
        ).select_related("project")

    @extend_schema(request=ImportRequestSerializer, responses=ImportBatchSerializer)
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        incoming = ImportRequestSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        project = project_get_for_user(request.user, data["project"])
        if not can_manage_data(request.user, project):
            raise PermissionDenied("Only researchers and admins import data.")
        user = cast(User, request.user)
        try:
            if "file" in data:
                batch = services.import_upload_start(
                    project=project,
                    user=user,
                    source_format=data["format"],
                    upload=data["file"],
                    skip_invalid=data["skip_invalid"],
                    mapping=data.get("mapping"),
                )
                return Response(ImportBatchSerializer(batch).data, status=202)
            batch = services.trajectory_records_import(
                project=project,
                user=user,
                records=data["trajectories"],
                skip_invalid=data["skip_invalid"],
            )
        except services.ImportRejected as rejected:
            return Response(ImportBatchSerializer(rejected.batch).data, status=400)
        except ValueError as error:
            raise ValidationError({"format": str(error)}) from None
        return Response(ImportBatchSerializer(batch).data, status=201)


router = DefaultRouter()
router.register("projects", ProjectViewSet, basename="project")
router.register("project-deletions", ProjectDeletionViewSet, basename="project-deletion")
router.register("trajectories", TrajectoryViewSet, basename="trajectory")
router.register("steps", StepViewSet, basename="step")
router.register("imports", ImportViewSet, basename="import")

urlpatterns: list[URLPattern | URLResolver] = [
    *members_urls,
    *follow_urls,
    path("", include(router.urls)),
]
