"""REST endpoints for policies and rollout jobs, mounted under /api/v1/ by
stepscope/api_urls.py. Querysets start from the user's projects, so anything outside
them is a 404; starting and cancelling need the researcher or admin role.

``/trajectories/{id}/mc-values/`` reads one trajectory's Monte Carlo step values under
the trajectory page's rule: an annotator of a project that hides model scores sees them
once they have submitted the trajectory."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.utils import extend_schema
from rest_framework import generics, mixins, status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter
from rest_framework.serializers import BaseSerializer

from labeling.selectors import labeling_state_for_user
from rollouts import selectors, services
from rollouts.models import Policy, RolloutJob, StepMC
from rollouts.serializers import (
    PolicySerializer,
    RolloutJobCreateSerializer,
    RolloutJobDetailSerializer,
    RolloutJobSerializer,
    StepMCSerializer,
)
from scoring.api import ModelReferenceViewSet
from scoring.references import ReferenceFields
from stepscope.jobs.api import JobViewSet
from stepscope.pagination import ByIdCursor
from stepscope.web import current_user
from trajectories.models import Project
from trajectories.selection import SelectionError
from trajectories.selectors import project_get_for_user


def _managed_project(request: Request, slug: str) -> Project:
    project = project_get_for_user(request.user, slug)
    if not selectors.can_run_rollouts(request.user, project):
        raise PermissionDenied("Rollouts need the researcher or admin role in this project.")
    return project


class PolicyViewSet(ModelReferenceViewSet):
    """``?project=SLUG`` lists the policies that project may use. A policy for every
    project (no ``project``) and ``trust_remote_code`` need a staff account."""

    serializer_class = PolicySerializer
    NOUN = "policy"

    def get_queryset(self) -> QuerySet[Policy]:
        slug = self.request.query_params.get("project")
        if slug:
            # Only those the project may roll out with (not another project's demo policy).
            project = project_get_for_user(self.request.user, slug)
            return selectors.policies_for_project(project).select_related("project")
        return selectors.policies_for_user(self.request.user).select_related("project")

    def managed_project(self, slug: str) -> Project:
        return _managed_project(self.request, slug)

    def reference_save(self, data: dict[str, Any], fields: ReferenceFields) -> Policy:
        try:
            return services.policy_create(**fields)
        except services.RolloutError as error:
            raise ValidationError({"detail": str(error)}) from None


class RolloutJobViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    JobViewSet,
):
    """``POST`` starts a job; poll its detail for progress, first errors found and
    critical steps. ``?project=SLUG`` narrows the list."""

    pagination_class = ByIdCursor

    def get_serializer_class(self) -> type[BaseSerializer[Any]]:
        if self.action == "retrieve":
            return RolloutJobDetailSerializer
        return RolloutJobSerializer

    def get_queryset(self) -> QuerySet[RolloutJob]:
        queryset = selectors.rollout_jobs_for_user(self.request.user)
        slug = self.request.query_params.get("project")
        if slug:
            queryset = queryset.filter(project__slug=slug)
        if self.action == "retrieve":
            queryset = queryset.prefetch_related("searches")
        return queryset

    @extend_schema(request=RolloutJobCreateSerializer, responses={201: RolloutJobSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = RolloutJobCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        project = _managed_project(request, data["project"])
        policy = _policy_by_name_or_id(project, data["policy"])
        steps = data["steps"]
        if isinstance(steps, list):
            mode = RolloutJob.Mode.CRITICAL if data["critical"] else RolloutJob.Mode.STEPS
        else:
            mode = steps
        alternatives = data.get("alternatives") or {}
        try:
            job = services.rollout_job_start(
                project=project,
                policy=policy,
                k=data["k"],
                mode=mode,
                user=current_user(request),
                step_ids=steps if isinstance(steps, list) else None,
                trajectory_ids=data.get("trajectories"),
                filters=data.get("filters"),
                alternatives={int(pk): text for pk, text in alternatives.items() if pk.isdigit()},
                answer_check=data["answer_check"],
                max_continuations=data.get("max_continuations"),
                max_tokens=data.get("max_tokens"),
                chunk_continuations=data.get("chunk_continuations"),
                against=data.get("against", ""),
            )
        except SelectionError as error:
            raise ValidationError({"filters": error.by_name()}) from None
        except services.RolloutError as error:
            raise ValidationError({"detail": str(error)}) from None
        return Response(RolloutJobSerializer(job).data, status=status.HTTP_201_CREATED)

    def may_cancel(self, user: Any, job: RolloutJob) -> bool:
        return selectors.can_run_rollouts(user, job.project)

    def job_cancel(self, job: RolloutJob) -> RolloutJob:
        return services.rollout_job_cancel(job=job)


class TrajectoryMCList(generics.ListAPIView[StepMC]):
    """One trajectory's Monte Carlo step values, every policy's (``?policy=`` a name or
    id narrows them), in step order."""

    serializer_class = StepMCSerializer
    pagination_class = None

    def get_queryset(self) -> QuerySet[StepMC]:
        state = labeling_state_for_user(self.request.user, int(self.kwargs["pk"]))
        if not state.show_model_scores:
            raise PermissionDenied(
                "This project hides model scores from annotators until they submit the trajectory."
            )
        values = StepMC.objects.filter(step__trajectory_id=state.trajectory.pk)
        wanted = self.request.query_params.get("policy")
        if wanted:
            values = values.filter(policy=_policy_by_name_or_id(state.project, wanted))
        return values.select_related("step", "policy").order_by("step__index", "policy_id")


def _policy_by_name_or_id(project: Project, value: str) -> Policy:
    policy = (
        selectors.policies_for_project(project).filter(pk=int(value)).first()
        if value.isdigit()
        else selectors.policy_by_name(project, value)
    )
    if policy is None:
        raise ValidationError({"policy": f"no policy {value!r} for this project"})
    return policy


# SimpleRouter: the API root view comes from trajectories/api.py.
router = SimpleRouter()
router.register("policies", PolicyViewSet, basename="policy")
router.register("rollouts", RolloutJobViewSet, basename="rollout")

urlpatterns: list[URLPattern | URLResolver] = [
    path("trajectories/<int:pk>/mc-values/", TrajectoryMCList.as_view(), name="trajectory-mc"),
    path("", include(router.urls)),
]
