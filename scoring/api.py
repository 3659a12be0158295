"""REST endpoints for scorers, scoring runs and attribution runs, mounted under /api/v1/ by
stepscope/api_urls.py. Querysets start from the user's projects, so anything outside
them is a 404; starting, cancelling, training and importing scores need the researcher
or admin role.

``/trajectories/{id}/scores/`` and ``/trajectories/{id}/credits/`` read one trajectory's
step scores and credits under the trajectory page's rule: an annotator of a project that
hides model scores sees them once they have submitted the trajectory.
``/step-scores/import/`` stores scores computed elsewhere, as ``manage.py import_scores``
does."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.utils import extend_schema
from rest_framework import generics, mixins, pagination, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from labeling.models import Queue
from labeling.selectors import LabelingState, can_compare, labeling_state_for_user
from scoring import selectors, services
from scoring.models import AttributionRun, Scorer, ScoringRun, StepCredit, StepScore
from scoring.references import ReferenceFields, reference_owner, reference_request
from scoring.rewards.api import urlpatterns as rewards_urls
from scoring.serializers import (
    AttributionRunCreateSerializer,
    AttributionRunSerializer,
    JudgePromptCreateSerializer,
    JudgePromptSerializer,
    ScorerSerializer,
    ScorerTrainSerializer,
    ScoresImportSerializer,
    ScoringRunCreateSerializer,
    ScoringRunSerializer,
    StepCreditSerializer,
    StepScoreSerializer,
    TrajectoryCreditSerializer,
)
from stepscope.jobs.api import JobViewSet
from stepscope.pagination import ByIdCursor
from stepscope.throttling import BULK_THROTTLES
from stepscope.web import current_user
from trajectories.models import Project, Step
from trajectories.selection import SelectionError
from trajectories.selectors import (
    can_manage_data,
    project_get_for_user,
    projects_for_user,
)


class ByStepCursor(pagination.CursorPagination):
    ordering = "step_id"
    page_size = 1000


def _managed_project(request: Request, slug: str) -> Project:
    project = project_get_for_user(request.user, slug)
    if not can_manage_data(request.user, project):
        raise PermissionDenied("Scoring needs the researcher or admin role in this project.")
    return project


# The API of a model reference (scorers here, rollouts' policies): list, read, and create
# (``reference_owner`` says who may, ``reference_save`` saves through the service). No
# docstring: the schema would show it for every subclass.
class ModelReferenceViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    pagination_class = ByIdCursor
    # "scorer", "policy": in the refusal of one for every project.
    NOUN = ""

    def managed_project(self, slug: str) -> Project:
        """The project, where the user may add references to it (else 403 / 404)."""
        raise NotImplementedError

    def reference_save(self, data: dict[str, Any], fields: ReferenceFields) -> Any:
        """The new reference from the service, or ValidationError with its refusal."""
        raise NotImplementedError

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer_class = self.get_serializer_class()
        serializer = serializer_class(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        user = current_user(request)
        project = reference_owner(user, data, noun=self.NOUN, managed_project=self.managed_project)
        saved = self.reference_save(data, reference_request(data, project=project, user=user))
        return Response(serializer_class(saved).data, status=status.HTTP_201_CREATED)


class ScorerViewSet(ModelReferenceViewSet):
    """``?project=SLUG`` lists the scorers that project may use. A scorer for every project
    (no ``project``) and ``trust_remote_code`` need a staff account."""

    serializer_class = ScorerSerializer
    NOUN = "scorer"

    def get_queryset(self) -> QuerySet[Scorer]:
        queryset = selectors.scorers_for_user(self.request.user).select_related("project")
        slug = self.request.query_params.get("project")
        if slug:
            queryset = queryset.filter(Q(project__slug=slug) | Q(project__isnull=True))
        return queryset

    def managed_project(self, slug: str) -> Project:
        return _managed_project(self.request, slug)

    def reference_save(self, data: dict[str, Any], fields: ReferenceFields) -> Scorer:
        try:
            return services.scorer_create(kind=data["kind"], prompt=data.get("prompt"), **fields)
        except services.ScoringError as error:
            raise ValidationError({error.field or "detail": str(error)}) from None

    @extend_schema(
        request=JudgePromptCreateSerializer,
        responses={200: JudgePromptSerializer(many=True), 201: JudgePromptSerializer},
    )
    @action(detail=True, methods=["get", "post"])
    def prompts(self, request: Request, pk: str | None = None) -> Response:
        """An llm-judge's prompt versions, newest first; POST adds the next version
        (versions are never edited)."""
        scorer = self.get_object()
        if request.method == "GET":
            return Response(JudgePromptSerializer(scorer.prompts.all(), many=True).data)
        if scorer.project is not None:
            _managed_project(request, scorer.project.slug)
        elif not request.user.is_staff:
            raise PermissionDenied("Only staff may change a scorer for every project.")
        serializer = JudgePromptCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            prompt = services.judge_prompt_create(
                scorer=scorer,
                system=data.get("system"),
                template=data.get("template"),
                note=data["note"],
                user=current_user(request),
            )
        except services.ScoringError as error:
            raise ValidationError({"detail": str(error)}) from None
        return Response(JudgePromptSerializer(prompt).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=ScorerTrainSerializer, responses={202: ScoringRunSerializer})
    @action(detail=False, methods=["post"])
    def train(self, request: Request) -> Response:
        """Train a new revision of a trained-head scorer on the project's labels."""
        serializer = ScorerTrainSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        project = _managed_project(request, data["project"])
        try:
            run = services.scorer_train_start(
                project=project,
                name=data["name"],
                user=current_user(request),
                encoder=data["encoder"],
                parameters=data["parameters"],
                neutral=data["neutral"],
                holdout=data["holdout"],
                score_after=data["score_after"],
            )
        except services.ScoringError as error:
            raise ValidationError({"detail": str(error)}) from None
        return Response(ScoringRunSerializer(run).data, status=status.HTTP_202_ACCEPTED)


class ScoringRunViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    JobViewSet,
):
    """``?project=SLUG`` narrows the list. Poll a run's detail for progress."""

    serializer_class = ScoringRunSerializer
    pagination_class = ByIdCursor

    def get_queryset(self) -> QuerySet[ScoringRun]:
        queryset = ScoringRun.objects.filter(
            project__in=projects_for_user(self.request.user)
        ).select_related("project", "scorer")
        slug = self.request.query_params.get("project")
        if slug:
            queryset = queryset.filter(project__slug=slug)
        return queryset

    @extend_schema(request=ScoringRunCreateSerializer, responses={201: ScoringRunSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = ScoringRunCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        project = _managed_project(request, data["project"])
        scorer = _scorer_by_name_or_id(project, data["scorer"])
        try:
            run = services.scoring_run_start(
                project=project,
                scorer=scorer,
                user=current_user(request),
                only_unscored=data["only_unscored"],
                trajectory_ids=data.get("trajectories"),
                filters=data.get("filters"),
                queue=_queue_by_name_or_id(project, data["queue"]) if "queue" in data else None,
                prompt_version=data.get("prompt_version"),
                on_too_long=data.get("on_too_long"),
                rubric=data.get("rubric"),
            )
        except SelectionError as error:
            raise ValidationError({"filters": error.by_name()}) from None
        except services.ScoringError as error:
            raise ValidationError({error.field or "scorer": str(error)}) from None
        return Response(ScoringRunSerializer(run).data, status=status.HTTP_201_CREATED)

    def may_cancel(self, user: Any, job: ScoringRun) -> bool:
        return can_manage_data(user, job.project)

    def job_cancel(self, job: ScoringRun) -> ScoringRun:
        return services.scoring_run_cancel(run=job)


class AttributionRunViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    JobViewSet,
):
    """Credit attribution runs. ``?project=SLUG`` and ``?method=NAME`` narrow the list;
    poll a run's detail for progress; ``credits/`` pages through its step credits.
    Starting and cancelling need the researcher or admin role; annotators may read."""

    serializer_class = AttributionRunSerializer
    pagination_class = ByIdCursor

    def get_queryset(self) -> QuerySet[AttributionRun]:
        queryset = AttributionRun.objects.filter(
            project__in=projects_for_user(self.request.user)
        ).select_related("project", "scorer")
        for name, lookup in (("project", "project__slug"), ("method", "method")):
            value = self.request.query_params.get(name)
            if value:
                queryset = queryset.filter(**{lookup: value})
        return queryset

    @extend_schema(
        request=AttributionRunCreateSerializer, responses={201: AttributionRunSerializer}
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = AttributionRunCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        project = _managed_project(request, data["project"])
        scorer = _scorer_by_name_or_id(project, data["scorer"]) if data["scorer"] else None
        step = None
        if data.get("step") is not None:
            step = (
                Step.objects.select_related("trajectory")
                .filter(pk=data["step"], trajectory__project=project)
                .first()
            )
            if step is None:
                raise ValidationError({"step": "no such step in this project"})
        try:
            run = services.attribution_run_start(
                project=project,
                method=data["method"],
                scorer=scorer,
                label_source=data["labels"],
                parameters=data["parameters"],
                trajectory_ids=data.get("trajectories"),
                filters=data.get("filters"),
                step=step,
                user=current_user(request),
            )
        except SelectionError as error:
            raise ValidationError({"filters": error.by_name()}) from None
        except services.ScoringError as error:
            raise ValidationError({"detail": str(error)}) from None
        return Response(AttributionRunSerializer(run).data, status=status.HTTP_201_CREATED)

    def may_cancel(self, user: Any, job: AttributionRun) -> bool:
        return can_manage_data(user, job.project)

    def job_cancel(self, job: AttributionRun) -> AttributionRun:
        return services.attribution_run_cancel(run=job)

    @extend_schema(responses={200: StepCreditSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=ByStepCursor)
    def credits(self, request: Request, pk: str | None = None) -> Response:
        """The run's step credits, by step id. Credits come from model scores or from
        everyone's labels, so a project that hides either from annotators keeps them to
        researchers and admins."""
        run = self.get_object()
        if not can_compare(request.user, run.project):
            raise PermissionDenied("This project hides labels or model scores from annotators.")
        credits = (
            StepCredit.objects.filter(run=run)
            .select_related("step")
            .only("id", "step_id", "step__trajectory_id", "step__index", "value", "level", "detail")
        )
        # Narrowed to one trajectory or step when asked; unknown parameters are refused
        # rather than ignored (an ignored ``trajectory`` once answered with every credit of
        # the run, other trajectories' included).
        for name, lookup in (("trajectory", "step__trajectory_id"), ("step", "step_id")):
            raw = request.query_params.get(name)
            if raw is not None:
                credits = credits.filter(**{lookup: _id_param(name, raw)})
        page = self.paginate_queryset(credits)
        rows = StepCreditSerializer(page if page is not None else credits, many=True).data
        return self.get_paginated_response(rows) if page is not None else Response(rows)


def _id_param(name: str, raw: str) -> int:
    if not raw.isdigit():
        raise ValidationError({name: f"expected an id, got {raw!r}"})
    return int(raw)


def _evidence_state(request: Request, pk: int) -> LabelingState:
    """The user's labeling state on the trajectory (404 outside their projects); 403
    while the project hides model scores (and what is made from them) from them."""
    state = labeling_state_for_user(request.user, pk)
    if not state.show_model_scores:
        raise PermissionDenied(
            "This project hides model scores from annotators until they submit the trajectory."
        )
    return state


class TrajectoryScoreList(generics.ListAPIView[StepScore]):
    """One trajectory's step scores, every scorer's (``?scorer=`` a name or id narrows
    them), in step order."""

    serializer_class = StepScoreSerializer
    pagination_class = None

    def get_queryset(self) -> QuerySet[StepScore]:
        state = _evidence_state(self.request, int(self.kwargs["pk"]))
        scores = StepScore.objects.filter(step__trajectory_id=state.trajectory.pk)
        wanted = self.request.query_params.get("scorer")
        if wanted:
            scores = scores.filter(scorer=_scorer_by_name_or_id(state.project, wanted))
        return scores.select_related("step", "scorer").order_by("step__index", "scorer_id")


class TrajectoryCreditList(generics.ListAPIView[StepCredit]):
    """One trajectory's step credits, from every attribution run (``?run=ID`` narrows
    them), in step order."""

    serializer_class = TrajectoryCreditSerializer
    pagination_class = None

    def get_queryset(self) -> QuerySet[StepCredit]:
        state = _evidence_state(self.request, int(self.kwargs["pk"]))
        credits = StepCredit.objects.filter(
            step__trajectory_id=state.trajectory.pk, run__project_id=state.project.pk
        )
        run = self.request.query_params.get("run")
        if run is not None:
            credits = credits.filter(run_id=_id_param("run", run))
        return credits.select_related("step", "run").order_by("step__index", "run_id")


class ScoresImport(generics.GenericAPIView[Any]):
    """Store step scores computed elsewhere (what ``manage.py import_scores`` does with a
    file): ``scores`` holds ``{trajectory: external id, step: index, value: 0..1}``
    objects. All or nothing unless ``skip_invalid``; a rejected record is named by its
    index in ``scores``."""

    serializer_class = ScoresImportSerializer
    throttle_classes = BULK_THROTTLES

    @extend_schema(request=ScoresImportSerializer, responses={201: dict[str, Any]})
    def post(self, request: Request) -> Response:
        incoming = ScoresImportSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        project = _managed_project(request, data["project"])
        try:
            run, problems = services.scores_import_records(
                project=project,
                scorer_name=data["scorer"],
                records=data["scores"],
                user=current_user(request),
                skip_invalid=data["skip_invalid"],
            )
        except services.ScoresRejected as rejected:
            return Response(
                {"scores": {str(p.line): p.message for p in rejected.problems}}, status=400
            )
        return Response(
            {
                "stored": run.done,
                "rejected": {str(p.line): p.message for p in problems},
                "run": run.pk,
                "scorer": run.scorer.name if run.scorer else None,
                "scorer_id": run.scorer_id,
            },
            status=status.HTTP_201_CREATED,
        )


def _scorer_by_name_or_id(project: Project, value: str) -> Scorer:
    scorers = selectors.scorers_for_project(project)
    scorer = (
        scorers.filter(pk=int(value)).first()
        if value.isdigit()
        else selectors.scorer_latest(project, value)
    )
    if scorer is None:
        raise ValidationError({"scorer": f"no scorer {value!r} for this project"})
    return scorer


def _queue_by_name_or_id(project: Project, value: str) -> Queue:
    queues = Queue.objects.filter(project=project)
    queue = (queues.filter(pk=int(value)) if value.isdigit() else queues.filter(name=value)).first()
    if queue is None:
        raise ValidationError({"queue": f"no queue {value!r} in this project"})
    return queue


# SimpleRouter: the API root view comes from trajectories/api.py.
router = SimpleRouter()
router.register("scorers", ScorerViewSet, basename="scorer")
router.register("scoring-runs", ScoringRunViewSet, basename="scoring-run")
router.register("attribution-runs", AttributionRunViewSet, basename="attribution-run")

urlpatterns: list[URLPattern | URLResolver] = [
    path("trajectories/<int:pk>/scores/", TrajectoryScoreList.as_view(), name="trajectory-scores"),
    path(
        "trajectories/<int:pk>/credits/", TrajectoryCreditList.as_view(), name="trajectory-credits"
    ),
    path("step-scores/import/", ScoresImport.as_view(), name="scores-import"),
    *rewards_urls,
    path("", include(router.urls)),
]
