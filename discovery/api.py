"""/api/v1/projects/<slug>/failure-modes/: a project's failure modes (GET: the latest
finished run's, or ``?run=``'s, with the recent runs) and a new run (POST, 202); and
/api/v1/failure-mode-runs/<id>/ with its ``cancel/`` (the job base's). The project
lookup makes anything outside the user's projects a 404."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.urls import URLPattern, URLResolver, include, path, reverse
from drf_spectacular.utils import extend_schema
from rest_framework import generics, mixins, serializers, status
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from discovery import mode_selectors, mode_services
from discovery.models import FailureModeRun
from labeling.selectors import can_compare
from scoring.models import Scorer
from stepscope.jobs.api import JobViewSet
from stepscope.serializers import StrictSerializer
from trajectories.models import Project
from trajectories.selection import SelectionError, selection_parse
from trajectories.selectors import can_manage_data, project_get_for_user, projects_for_user


def _project(request: Request, slug: str) -> Project:
    """The project, for a user who may compare in it (404 outside the user's projects)."""
    project = project_get_for_user(request.user, slug)
    if not can_compare(request.user, project):
        raise PermissionDenied("This project hides labels or model scores from annotators.")
    return project


class FailureModeRunSerializer(serializers.ModelSerializer[FailureModeRun]):
    project = serializers.SlugRelatedField[Project](slug_field="slug", read_only=True)
    judge = serializers.SlugRelatedField[Scorer](slug_field="name", read_only=True)

    class Meta:
        model = FailureModeRun
        fields = (
            "id",
            "project",
            "status",
            "label_source",
            "threshold",
            "selection",
            "judge",
            "chosen",
            "total",
            "done",
            "k",
            "silhouette",
            "error",
            "created_at",
            "started_at",
            "finished_at",
        )
        read_only_fields = fields


class FailureModeRunStartSerializer(StrictSerializer):
    labels = serializers.CharField(required=False, allow_blank=True, default="")
    threshold = serializers.FloatField(required=False, min_value=0, max_value=1, allow_null=True)
    filters = serializers.DictField(required=False, default=dict)
    judge = serializers.CharField(required=False, allow_blank=True, default="")


class RunParamsSerializer(StrictSerializer):
    run = serializers.IntegerField(required=False, min_value=1)


def _mode_json(view: mode_selectors.ModeView, list_url: str) -> dict[str, Any]:
    mode = view.mode
    return {
        "id": mode.pk,
        "number": mode.number,
        "name": mode.name,
        "words": mode.words,
        "description": mode.description,
        "size": mode.size,
        "share": mode.share,
        "kept": mode.kept,
        "examples": [
            {
                "step": e.step_id,
                "trajectory": e.trajectory_id,
                "external_id": e.external_id,
                "index": e.index,
                "preview": e.preview,
            }
            for e in view.examples
        ],
        "splits": {name: dict(values) for name, values in view.splits.items()},
        "selection": {"failure_mode": mode.pk},
        "list_url": f"{list_url}?origin=&failure_mode={mode.pk}",
    }


class FailureModesView(generics.GenericAPIView[Any]):
    """GET: the modes of the project's latest finished run (or ``?run=``), each with its
    size, share, examples, splits by model, agent, tool and task, and the selection
    (``failure_mode``) that chooses its trajectories; and the recent runs. POST: start a
    run (researchers and admins): ``labels`` (a label source, default the compare page's),
    ``threshold``, ``filters`` (the list's, by name; default the failed trajectories),
    ``judge`` (an LLM judge's name, for one-line descriptions). 202 with the run."""

    serializer_class = FailureModeRunStartSerializer
    pagination_class = None

    @extend_schema(parameters=[RunParamsSerializer], responses={200: dict})
    def get(self, request: Request, slug: str) -> Response:
        project = _project(request, slug)
        params = RunParamsSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        runs = mode_selectors.failure_mode_runs(project)
        chosen = params.validated_data.get("run")
        run = (
            runs.filter(pk=chosen).first()
            if chosen
            else mode_selectors.failure_mode_run_latest(project)
        )
        if chosen and run is None:
            raise NotFound(f"run: no failure-mode run {chosen} in project {project.slug!r}")
        list_url = reverse("trajectory-list", args=[project.slug])
        return Response(
            {
                "run": FailureModeRunSerializer(run).data if run else None,
                "modes": [
                    _mode_json(view, list_url)
                    for view in (mode_selectors.failure_modes_shown(run) if run else [])
                ],
                "runs": FailureModeRunSerializer(runs[: mode_selectors.RUNS_SHOWN], many=True).data,
            }
        )

    @extend_schema(request=FailureModeRunStartSerializer, responses={202: FailureModeRunSerializer})
    def post(self, request: Request, slug: str) -> Response:
        project = _project(request, slug)
        if not can_manage_data(request.user, project):
            raise PermissionDenied("Only researchers and admins start failure-mode runs.")
        body = FailureModeRunStartSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            filters = selection_parse(data["filters"])
        except SelectionError as error:
            raise ValidationError({"filters": error.by_name()}) from None
        try:
            run = mode_services.failure_mode_run_start(
                project=project,
                user=request.user,  # type: ignore[arg-type]
                labels=data["labels"],
                threshold=data.get("threshold"),
                filters=filters,
                judge=data["judge"],
            )
        except mode_services.FailureModeError as error:
            raise ValidationError(error.errors) from None
        return Response(FailureModeRunSerializer(run).data, status=status.HTTP_202_ACCEPTED)


class FailureModeRunViewSet(mixins.RetrieveModelMixin, JobViewSet):
    """A failure-mode run (GET) and ``cancel/`` (researchers and admins)."""

    serializer_class = FailureModeRunSerializer

    def get_queryset(self) -> QuerySet[FailureModeRun]:
        return FailureModeRun.objects.filter(
            project__in=projects_for_user(self.request.user)
        ).select_related("project", "judge")

    def get_object(self) -> FailureModeRun:
        run: FailureModeRun = super().get_object()
        if not can_compare(self.request.user, run.project):
            raise PermissionDenied("This project hides labels or model scores from annotators.")
        return run

    def may_cancel(self, user: Any, job: Any) -> bool:
        return can_manage_data(user, job.project)

    def job_cancel(self, job: Any) -> Any:
        return mode_services.failure_mode_run_cancel(run=job)


router = SimpleRouter()
router.register("failure-mode-runs", FailureModeRunViewSet, basename="failure-mode-run")

urlpatterns: list[URLPattern | URLResolver] = [
    path(
        "projects/<slug:slug>/failure-modes/",
        FailureModesView.as_view(),
        name="api-failure-modes",
    ),
    path("", include(router.urls)),
]
