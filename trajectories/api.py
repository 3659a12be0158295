"""Read endpoints for projects, trajectories and steps. Querysets start from the
user's projects, so anything outside them is a 404, as on the pages."""

from __future__ import annotations

from django.db.models import QuerySet
from django.urls import URLPattern, URLResolver, include, path
from rest_framework import mixins, pagination, viewsets
from rest_framework.routers import DefaultRouter

from trajectories.models import Project, Step, Trajectory
from trajectories.selectors import projects_for_user
from trajectories.serializers import ProjectSerializer, StepSerializer, TrajectorySerializer


class ProjectViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = ProjectSerializer
    lookup_field = "slug"
    pagination_class = None

    def get_queryset(self) -> QuerySet[Project]:
        return projects_for_user(self.request.user).order_by("name")


class ByIdCursor(pagination.CursorPagination):
    ordering = "-id"


class TrajectoryViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """``?project=SLUG`` narrows the list to one project; ``?external_id=`` finds one."""

    serializer_class = TrajectorySerializer
    pagination_class = ByIdCursor

    def get_queryset(self) -> QuerySet[Trajectory]:
        queryset = Trajectory.objects.filter(
            project__in=projects_for_user(self.request.user)
        ).select_related("project")
        params = self.request.query_params
        if params.get("project"):
            queryset = queryset.filter(project__slug=params["project"])
        if params.get("external_id"):
            queryset = queryset.filter(external_id=params["external_id"])
        return queryset


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


router = DefaultRouter()
router.register("projects", ProjectViewSet, basename="project")
router.register("trajectories", TrajectoryViewSet, basename="trajectory")
router.register("steps", StepViewSet, basename="step")

urlpatterns: list[URLPattern | URLResolver] = [path("", include(router.urls))]
