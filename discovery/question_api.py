"""/api/v1/projects/<slug>/questions/: a project's questions (GET, newest first) and a new
one (POST, researchers and admins, 202); /api/v1/questions/<id>/ with the judge's answers,
and its ``cancel/`` (the job base's). Anything outside the user's projects is a 404."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.utils import extend_schema
from rest_framework import generics, mixins, serializers, status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from discovery.question_models import Question, QuestionAnswer
from discovery.question_services import (
    LIMIT_MAX,
    QUESTION_MAX_CHARS,
    QuestionError,
    question_ask,
    question_judges,
    questions_for_project,
)
from scoring.selectors import scorer_latest
from stepscope.jobs.api import JobViewSet
from stepscope.jobs.lifecycle import job_cancel
from stepscope.serializers import StrictSerializer
from stepscope.web import current_user
from trajectories.models import Project
from trajectories.selection import SelectionError
from trajectories.selectors import can_manage_data, project_get_for_user, projects_for_user

RECENT = 50


QUESTION_FIELDS: tuple[str, ...] = (
    "id",
    "project",
    "status",
    "text",
    "judge_name",
    "given_filters",
    "filters",
    "proposed",
    "refused",
    "criterion",
    "limit",
    "total",
    "done",
    "matched",
    "unreadable",
    "error",
    "created_at",
    "started_at",
    "finished_at",
)


class QuestionSerializer(serializers.ModelSerializer[Question]):
    project = serializers.SlugRelatedField[Project](slug_field="slug", read_only=True)

    class Meta:
        model = Question
        fields = QUESTION_FIELDS
        read_only_fields = fields


class AnswerSerializer(serializers.ModelSerializer[QuestionAnswer]):
    step_index = serializers.IntegerField(source="step.index", read_only=True, allow_null=True)

    class Meta:
        model = QuestionAnswer
        fields = ("trajectory", "step", "step_index", "matched", "reason", "problem")
        read_only_fields = fields


class QuestionDetailSerializer(QuestionSerializer):
    answers = serializers.SerializerMethodField()

    class Meta(QuestionSerializer.Meta):
        fields = (*QUESTION_FIELDS, "answers")
        read_only_fields = fields

    def get_answers(self, question: Question) -> list[dict[str, Any]]:
        answers = question.answers.select_related("step").order_by(
            "-matched", "problem", "-trajectory_id"
        )
        return list(AnswerSerializer(answers, many=True).data)


class QuestionAskSerializer(StrictSerializer):
    text = serializers.CharField(max_length=QUESTION_MAX_CHARS)
    judge = serializers.CharField(help_text="An LLM judge of the project, by name.")
    filters = serializers.DictField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The selection to read, by the list's filter names; absent or null: the"
        " judge proposes one.",
    )
    limit = serializers.IntegerField(required=False, min_value=1, max_value=LIMIT_MAX, default=30)


class QuestionsView(generics.GenericAPIView[Any]):
    """GET: the project's questions, newest first (members). POST: ask one (researchers
    and admins): ``text``, ``judge`` (an LLM judge's name), ``filters`` (optional: the
    selection to read; without it the judge proposes one), ``limit`` (trajectories read,
    default 30). 202 with the question; its answers come at ``/api/v1/questions/<id>/``."""

    serializer_class = QuestionAskSerializer
    pagination_class = None

    @extend_schema(responses={200: QuestionSerializer(many=True)})
    def get(self, request: Request, slug: str) -> Response:
        project = project_get_for_user(request.user, slug)
        questions = questions_for_project(project).select_related("project")[:RECENT]
        return Response(QuestionSerializer(questions, many=True).data)

    @extend_schema(request=QuestionAskSerializer, responses={202: QuestionSerializer})
    def post(self, request: Request, slug: str) -> Response:
        project = project_get_for_user(request.user, slug)
        if not can_manage_data(request.user, project):
            raise PermissionDenied("Only the project's researchers and admins ask questions.")
        body = QuestionAskSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        judge = scorer_latest(project, data["judge"])
        if judge is None or not question_judges(project).filter(pk=judge.pk).exists():
            raise ValidationError(
                {"judge": [f"No LLM judge named {data['judge']!r} in project {project.slug!r}."]}
            )
        try:
            question = question_ask(
                project=project,
                user=current_user(request),
                text=data["text"],
                judge=judge,
                filters=data["filters"],
                limit=data["limit"],
            )
        except QuestionError as error:
            raise ValidationError({error.field: [str(error)]}) from None
        except SelectionError as error:
            raise ValidationError({"filters": error.by_name()}) from None
        return Response(QuestionSerializer(question).data, status=status.HTTP_202_ACCEPTED)


class QuestionViewSet(mixins.RetrieveModelMixin, JobViewSet):
    """A question with its answers (GET) and ``cancel/`` (researchers and admins)."""

    serializer_class = QuestionDetailSerializer

    def get_queryset(self) -> QuerySet[Question]:
        return Question.objects.filter(
            project__in=projects_for_user(self.request.user)
        ).select_related("project")

    def may_cancel(self, user: Any, job: Any) -> bool:
        return can_manage_data(user, job.project)

    def job_cancel(self, job: Any) -> Any:
        return job_cancel(job)


router = SimpleRouter()
router.register("questions", QuestionViewSet, basename="api-question")

urlpatterns: list[URLPattern | URLResolver] = [
    path("projects/<slug:slug>/questions/", QuestionsView.as_view(), name="api-questions"),
    path("", include(router.urls)),
]
