"""/api/v1/compare/: a scorer against a label source, as JSON;
/api/v1/scorers/<id>/alignment/: every prompt version of an LLM judge against a human
label source; and /api/v1/projects/<slug>/rubric-alignment/: one rubric source against
another, per criterion. The project and scorer lookups make anything outside the user's projects a
404."""

from __future__ import annotations

from typing import Any, cast

from django.urls import URLPattern, URLResolver, path
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from evaluation import alignment, compare, decisive, rubric_alignment
from evaluation.serializers import (
    AlignmentParamsSerializer,
    CompareParamsSerializer,
    DecisiveParamsSerializer,
    RubricAlignmentParamsSerializer,
)
from labeling import selectors
from scoring.selectors import scorer_get_for_user
from trajectories.models import Project
from trajectories.selectors import project_get_for_user


def _params(request: Request, serializer: type[serializers.Serializer[Any]]) -> dict[str, Any]:
    """The request's query parameters, checked by ``serializer`` (a 400 naming the bad
    ones)."""
    params = serializer(data=request.query_params)
    params.is_valid(raise_exception=True)
    return dict(params.validated_data)


def _project(request: Request, slug: str) -> Project:
    """The project, for a user who may compare in it: a 404 outside the user's projects,
    a 403 where it hides labels or scores from annotators."""
    project = project_get_for_user(request.user, slug)
    if not selectors.can_compare(request.user, project):
        raise PermissionDenied("This project hides labels or model scores from annotators.")
    return project


class CompareView(generics.GenericAPIView[Any]):
    """A scorer against a label source: confusion matrix, kappa, AUROC, calibration,
    ProcessBench first-error metrics and their threshold sweep, outcome against process,
    a breakdown by ``by`` and, with ``humans=true``, agreement among the annotators. The
    same JSON as ``python manage.py compare --json``."""

    serializer_class = CompareParamsSerializer
    pagination_class = None

    @extend_schema(parameters=[CompareParamsSerializer], responses={200: dict})
    def get(self, request: Request) -> Response:
        data = _params(request, CompareParamsSerializer)
        project = _project(request, str(data["project"]))
        try:
            query = compare.compare_query_build(
                project,
                scorer=str(data["scorer"]),
                labels=str(data["labels"]),
                threshold=cast(float, data["threshold"]),
                slice_text=str(data["slice"]),
            )
        except ValueError as error:
            raise ValidationError({"detail": str(error)}) from None
        result = compare.compare_run(query, by=str(data["by"]), humans=bool(data["humans"]))
        return Response(result.as_json())


class DecisiveCompareView(generics.GenericAPIView[Any]):
    """One decisive-failure source against another (``human:<user>``, ``import:<source>``,
    ``model:<scorer>``): agent accuracy and decisive-step accuracy, exact and within
    ``k`` steps, each with its counts and a bootstrap interval."""

    serializer_class = DecisiveParamsSerializer
    pagination_class = None

    @extend_schema(parameters=[DecisiveParamsSerializer], responses={200: dict})
    def get(self, request: Request) -> Response:
        data = _params(request, DecisiveParamsSerializer)
        project = _project(request, str(data["project"]))
        try:
            result = decisive.decisive_compare(
                project,
                reference=str(data["reference"]),
                candidate=str(data["candidate"]),
                k=cast(int, data["k"]),
            )
        except ValueError as error:
            raise ValidationError({"detail": str(error)}) from None
        return Response(result.as_json())


class JudgeAlignmentView(generics.GenericAPIView[Any]):
    """Every prompt version of an LLM judge against a human label source (``source``,
    default ``human:majority``): kappa, bad-step F1 and first-error F1 with bootstrap
    intervals, agent and step accuracy of its failure verdicts against ``decisive``,
    parse failures, calls and tokens; the numbers of the judge alignment page."""

    serializer_class = AlignmentParamsSerializer
    pagination_class = None

    @extend_schema(parameters=[AlignmentParamsSerializer], responses={200: dict})
    def get(self, request: Request, pk: int) -> Response:
        data = _params(request, AlignmentParamsSerializer)
        scorer = scorer_get_for_user(request.user, pk)
        slug = str(data["project"]) or (scorer.project.slug if scorer.project else "")
        if not slug:
            raise ValidationError(
                {"project": "this scorer is offered to every project: name one (?project=)"}
            )
        project = _project(request, slug)
        try:
            scorer = alignment.judge_for_project(project, pk)
            query = alignment.alignment_query_build(
                project, scorer, source=str(data["source"]), decisive=str(data["decisive"])
            )
        except alignment.NotFound as error:
            raise NotFound(str(error)) from None
        except ValueError as error:
            field, _, message = str(error).partition(": ")
            raise ValidationError({field: message} if message else {"detail": str(error)}) from None
        return Response(alignment.alignment_run(query).as_json())


class RubricAlignmentView(generics.GenericAPIView[Any]):
    """One rubric source against another (``rubric:human:<user>``,
    ``rubric:human:majority``, ``rubric:judge:<scorer>``) on the project's current rubric
    (``rubric``, by name, where it has several; ``version`` for an earlier version's
    marks): per criterion, the pairs both marked,
    agreement, Cohen's kappa, the marks' confusion and the evidence steps' mean Jaccard
    overlap. A parameter or source it does not know is a 400 naming it."""

    serializer_class = RubricAlignmentParamsSerializer
    pagination_class = None

    @extend_schema(parameters=[RubricAlignmentParamsSerializer], responses={200: dict})
    def get(self, request: Request, slug: str) -> Response:
        project = _project(request, slug)  # outsiders: 404 whatever they ask
        data = _params(request, RubricAlignmentParamsSerializer)
        try:
            result = rubric_alignment.rubric_compare(
                project,
                a=str(data["a"]),
                b=str(data["b"]),
                rubric=str(data["rubric"]),
                version=data.get("version"),
            )
        except rubric_alignment.AlignmentRefused as error:
            raise ValidationError({error.field: error.message}) from None
        return Response(result.as_json())


urlpatterns: list[URLPattern | URLResolver] = [
    path("compare/", CompareView.as_view(), name="api-compare"),
    path("compare/decisive/", DecisiveCompareView.as_view(), name="api-compare-decisive"),
    path("scorers/<int:pk>/alignment/", JudgeAlignmentView.as_view(), name="scorer-alignment"),
    path(
        "projects/<slug:slug>/rubric-alignment/",
        RubricAlignmentView.as_view(),
        name="api-rubric-alignment",
    ),
]
