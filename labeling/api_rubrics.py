"""REST endpoints for rubrics and episode verdicts (issue #36), mounted with the rest of
labeling's under /api/v1/:

- ``projects/{slug}/rubrics/``: GET the project's current rubrics (members); POST
  ``{"name", "criteria": [{"text", "weight", "condition"}]}`` saves a new version (admins).
- ``trajectories/{id}/rubric/``: GET the rubric results you may see (blind mode as for
  labels: yours alone until you submit); POST ``{"rubric", "marks": [{"criterion",
  "mark", "evidence"}], "queue"}`` sets your marks, all or none.
- ``trajectories/{id}/episode/``: GET the episode verdicts you may see; POST ``{"agent",
  "outcome", "failure_mode", "critique", "queue"}`` sets yours (every answer empty clears it).

Writes go through the services the pages use; errors name the field.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.urls import URLPattern, path
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from labeling import selectors
from labeling.models import EpisodeVerdict, Rubric
from labeling.rubrics import MARKS, MAX_CRITERIA
from labeling.selectors.rubrics import episode_verdicts, rubric_results, rubrics_active
from labeling.services import LabelingError
from labeling.services.rubrics import episode_verdict_set, rubric_mark_set, rubric_save
from stepscope.serializers import StrictSerializer
from trajectories.selectors import project_get_for_admin, project_get_for_user

QUEUE_HELP = "the queue you leased the trajectory from"


class RubricSerializer(serializers.ModelSerializer[Rubric]):
    class Meta:
        model = Rubric
        fields = ("id", "name", "version", "criteria", "created_at")


class RubricWriteSerializer(StrictSerializer):
    name = serializers.CharField(required=False, default="rubric", max_length=100)
    criteria = serializers.ListField(
        child=serializers.JSONField(), allow_empty=False, max_length=MAX_CRITERIA
    )


class MarkSerializer(StrictSerializer):
    criterion = serializers.IntegerField(min_value=0)
    mark = serializers.ChoiceField(
        [*MARKS, ""],
        required=False,
        allow_null=True,
        default=None,
        help_text="met, not_met or na; empty takes the mark away; left out keeps it",
    )
    evidence = serializers.ListField(
        child=serializers.IntegerField(min_value=0),
        required=False,
        allow_null=True,
        default=None,
        help_text="step indexes; replaces the links",
    )


class RubricMarksWriteSerializer(StrictSerializer):
    rubric = serializers.IntegerField(help_text="the id of the rubric version you mark")
    marks = serializers.ListField(child=MarkSerializer(), allow_empty=False)
    queue = serializers.IntegerField(required=False, allow_null=True, help_text=QUEUE_HELP)


class EpisodeVerdictSerializer(serializers.ModelSerializer[EpisodeVerdict]):
    annotator = serializers.CharField(source="annotator.username", read_only=True)

    class Meta:
        model = EpisodeVerdict
        fields = ("annotator", "agent", "outcome", "failure_mode", "critique", "updated_at")


class EpisodeVerdictWriteSerializer(StrictSerializer):
    agent = serializers.CharField(required=False, allow_blank=True, default="", max_length=200)
    outcome = serializers.ChoiceField(
        [*EpisodeVerdict.Outcome.values, ""], required=False, default=""
    )
    failure_mode = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=200
    )
    critique = serializers.CharField(
        required=False, allow_blank=True, default="", trim_whitespace=False
    )
    queue = serializers.IntegerField(required=False, allow_null=True, help_text=QUEUE_HELP)


def _refused(error: LabelingError) -> Response:
    return Response({error.field or "detail": error.message}, status=error.status)


class ProjectRubrics(generics.GenericAPIView[Any]):
    """The project's current rubrics (newest version of each name); admins save a new
    version with POST."""

    serializer_class = RubricWriteSerializer

    @extend_schema(responses={200: RubricSerializer(many=True)})
    def get(self, request: Request, slug: str) -> Response:
        project = project_get_for_user(request.user, slug)
        return Response(RubricSerializer(rubrics_active(project), many=True).data)

    @extend_schema(request=RubricWriteSerializer, responses={201: RubricSerializer})
    def post(self, request: Request, slug: str) -> Response:
        project = project_get_for_admin(request.user, slug, does="edit the rubric")
        incoming = RubricWriteSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        try:
            rubric = rubric_save(
                project=project,
                user_id=request.user.pk,
                name=incoming.validated_data["name"],
                criteria=incoming.validated_data["criteria"],
            )
        except LabelingError as error:
            return _refused(error)
        return Response(RubricSerializer(rubric).data, status=status.HTTP_201_CREATED)


class TrajectoryRubric(generics.GenericAPIView[Any]):
    """Rubric results on a trajectory: each criterion's mark and evidence steps, and the
    score (the weighted share met, n/a left out)."""

    serializer_class = RubricMarksWriteSerializer

    def get(self, request: Request, pk: int) -> Response:
        state = selectors.labeling_state_for_user(request.user, pk)
        return Response([r.as_dict() for r in rubric_results(state) if r.marked or r.own])

    @extend_schema(request=RubricMarksWriteSerializer)
    def post(self, request: Request, pk: int) -> Response:
        state = selectors.labeling_state_for_user(request.user, pk)  # outsiders: 404
        incoming = RubricMarksWriteSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        if data.get("queue") is not None:
            state = selectors.labeling_state_for_user(request.user, pk, queue_id=data["queue"])
        try:
            with transaction.atomic():
                for position, item in enumerate(data["marks"]):
                    try:
                        rubric_mark_set(
                            state=state,
                            rubric_id=data["rubric"],
                            criterion=item["criterion"],
                            mark=item["mark"],
                            evidence=item["evidence"],
                        )
                    except LabelingError as error:
                        if error.field in ("criterion", "mark", "evidence"):
                            error.field = f"marks.{position}.{error.field}"
                        raise
        except LabelingError as error:
            return _refused(error)
        mine = [r for r in rubric_results(state, mine_only=True) if r.rubric.pk == data["rubric"]]
        return Response(mine[0].as_dict() if mine else {})


class TrajectoryEpisode(generics.GenericAPIView[Any]):
    """Episode verdicts on a trajectory: outcome, failure mode and critique, for the
    episode (``agent`` empty) or one of its agents."""

    serializer_class = EpisodeVerdictWriteSerializer

    @extend_schema(responses={200: EpisodeVerdictSerializer(many=True)})
    def get(self, request: Request, pk: int) -> Response:
        state = selectors.labeling_state_for_user(request.user, pk)
        return Response(EpisodeVerdictSerializer(episode_verdicts(state), many=True).data)

    @extend_schema(request=EpisodeVerdictWriteSerializer, responses={200: EpisodeVerdictSerializer})
    def post(self, request: Request, pk: int) -> Response:
        state = selectors.labeling_state_for_user(request.user, pk)  # outsiders: 404
        incoming = EpisodeVerdictWriteSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        if data.get("queue") is not None:
            state = selectors.labeling_state_for_user(request.user, pk, queue_id=data["queue"])
        try:
            verdict = episode_verdict_set(
                state=state,
                agent=data["agent"],
                outcome=data["outcome"],
                failure_mode=data["failure_mode"],
                critique=data["critique"],
            )
        except LabelingError as error:
            return _refused(error)
        if verdict is None:
            return Response({"agent": data["agent"], "cleared": True})
        return Response(EpisodeVerdictSerializer(verdict).data)


urlpatterns: list[URLPattern] = [
    path("projects/<slug:slug>/rubrics/", ProjectRubrics.as_view(), name="api-project-rubrics"),
    path("trajectories/<int:pk>/rubric/", TrajectoryRubric.as_view(), name="api-trajectory-rubric"),
    path(
        "trajectories/<int:pk>/episode/", TrajectoryEpisode.as_view(), name="api-trajectory-episode"
    ),
]
