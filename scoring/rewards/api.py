"""The reward service's endpoints, mounted under /api/v1/ by ``scoring/api.py``:

- ``POST /rewards/``: a batch of trajectories (Stepscope records or OpenAI chat runs) and
  a scorer of the project (a PRM, a trained head or an LLM judge); per-step scores, one
  reward per trajectory, the scorer's revision (a judge's: its model and prompt version).
- ``POST /rewards/openrlhf/?project=SLUG&scorer=NAME``: OpenRLHF's remote reward model
  body (``{"query": [...], "prompts": [...], "labels": [...]}``) answered with
  ``{"rewards": [...]}``. OpenRLHF posts to a bare URL without headers, so this route
  also takes the API token as ``?token=``.

Any project member may ask (it reads scores, as the trajectory page does); outsiders get
a 404, as for everything of a project. A worker that cannot answer within the deadline
gives 504; no worker or a full queue gives 503 with ``Retry-After``; a judge whose
endpoint fails gives 502 naming the judge.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.urls import URLPattern, path
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import ApiTokenAuthentication
from scoring import selectors
from scoring.models import Scorer
from scoring.rewards.inputs import (
    AGGREGATES,
    CREDITS,
    RewardInputError,
    openrlhf_parse,
    trajectories_parse,
)
from scoring.services.rewards import RewardRefused, Rewards, judge_revision, rewards_compute
from stepscope.serializers import StrictSerializer
from stepscope.web import current_user
from trajectories.formats.base import ParsedTrajectory
from trajectories.models import Project
from trajectories.selectors import project_get_for_user


def _timeout_field() -> serializers.FloatField:
    return serializers.FloatField(
        required=False,
        min_value=0.1,
        help_text="Seconds to wait for the rewards (default STEPSCOPE_REWARDS_TIMEOUT; at most"
        " STEPSCOPE_REWARDS_MAX_TIMEOUT); past it the answer is a 504.",
    )


SCORER_HELP = (
    "A scorer of the project, by name or id: a PRM, a trained head, or an llm-judge in the"
    " per-step or trajectory mode (asked on the reward worker, as a judge run asks it)."
    " Imported (external) scorers have nothing to run and are refused."
)


def _prompt_version_field() -> serializers.IntegerField:
    return serializers.IntegerField(
        required=False,
        min_value=1,
        help_text="An llm-judge's prompt version to ask with (default: its newest); refused"
        " for other scorers.",
    )


def _timeout(value: float | None) -> float:
    limit = settings.STEPSCOPE_REWARDS_MAX_TIMEOUT
    if value is None:
        return float(settings.STEPSCOPE_REWARDS_TIMEOUT)
    if value > limit:
        raise ValidationError({"timeout": [f"is {value:g} s; the most is {limit} s"]})
    return value


class RewardRequestSerializer(StrictSerializer):
    project = serializers.SlugField()
    scorer = serializers.CharField(help_text=SCORER_HELP)
    prompt_version = _prompt_version_field()
    trajectories = serializers.ListField(
        child=serializers.JSONField(),
        help_text="Stepscope trajectory records (as POST /imports/ takes them), OpenAI chat"
        " runs ({messages: [...]}), or lists of chat messages.",
    )
    aggregate = serializers.ChoiceField(choices=AGGREGATES, default="min")
    credit = serializers.ChoiceField(choices=CREDITS, default="none")
    timeout = _timeout_field()
    store = serializers.BooleanField(
        default=False, help_text="Also import the rollouts and their scores into the project."
    )

    def validate_trajectories(self, value: list[Any]) -> list[Any]:
        return _batch_size_check(value, "trajectories")


class OpenRLHFBodySerializer(StrictSerializer):
    query = serializers.ListField(child=serializers.JSONField())
    prompts = serializers.ListField(child=serializers.JSONField(), required=False)
    labels = serializers.ListField(child=serializers.JSONField(), required=False)

    def validate_query(self, value: list[Any]) -> list[Any]:
        return _batch_size_check(value, "queries")


class OpenRLHFParamsSerializer(StrictSerializer):
    project = serializers.SlugField()
    scorer = serializers.CharField(help_text=SCORER_HELP)
    prompt_version = _prompt_version_field()
    aggregate = serializers.ChoiceField(choices=AGGREGATES, default="min")
    separator = serializers.CharField(
        default="\n\n", trim_whitespace=False, help_text="Where a response is cut into steps."
    )
    timeout = _timeout_field()
    store = serializers.BooleanField(default=False)
    token = serializers.CharField(required=False, help_text="The API token, for OpenRLHF.")


def _batch_size_check(value: list[Any], noun: str) -> list[Any]:
    cap = settings.STEPSCOPE_REWARDS_MAX_TRAJECTORIES
    if not value:
        raise ValidationError(f"is empty; send at least one of the {noun} to score")
    if len(value) > cap:
        raise ValidationError(
            f"holds {len(value)} {noun}; a request takes at most {cap}"
            " (STEPSCOPE_REWARDS_MAX_TRAJECTORIES): split the batch"
        )
    return value


class QueryTokenAuthentication(ApiTokenAuthentication):
    """``?token=ssk_…``, for clients that post to a bare URL (OpenRLHF's
    ``--remote_rm_url``). The URL then holds a credential: keep it out of shared logs."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        token = request.query_params.get("token")
        if not token:
            return None
        user, auth = self.authenticate_credentials(token.encode())
        return user, auth


def _scorer(project: Project, value: str) -> Scorer:
    scorers = selectors.scorers_for_project(project)
    scorer = (
        scorers.filter(pk=int(value)).first()
        if value.isdigit()
        else selectors.scorer_latest(project, value)
    )
    if scorer is None:
        raise ValidationError({"scorer": [f"no scorer {value!r} for project {project.slug!r}"]})
    return scorer


def _rewards(
    request: Request,
    *,
    project: Project,
    scorer: Scorer,
    trajectories: list[ParsedTrajectory],
    aggregate: str,
    credit: str,
    timeout: float | None,
    store: bool,
    prompt_version: int | None,
) -> Rewards | Response:
    try:
        return rewards_compute(
            project=project,
            scorer=scorer,
            trajectories=trajectories,
            aggregate=aggregate,
            credit=credit,
            timeout_s=_timeout(timeout),
            store=store,
            user=current_user(request) if store else None,
            prompt_version=prompt_version,
        )
    except RewardRefused as refused:
        body: dict[str, Any] = (
            {refused.field: [refused.message]} if refused.field else {"detail": refused.message}
        )
        response = Response(body, status=refused.status)
        if refused.retry_after is not None:
            response["Retry-After"] = str(refused.retry_after)
        return response


def _store_check(request: Request, project: Project, store: bool) -> None:
    from trajectories.selectors import can_manage_data

    if store and not can_manage_data(request.user, project):
        raise ValidationError(
            {"store": ["storing rollouts imports them: it needs the researcher or admin role"]}
        )


class RewardsView(APIView):
    @extend_schema(request=RewardRequestSerializer, responses={200: dict[str, Any]})
    def post(self, request: Request) -> Response:
        """Score a batch of trajectories with a scorer of the project: ``rewards`` holds,
        per trajectory in order, ``steps`` (each step's value, null for steps not
        scored: system, user and tool turns), ``reward`` (the ``aggregate`` of its scored
        steps) and, with ``credit``, each step's credit. An llm-judge's answer adds
        ``judge``: its model, mode, prompt version and the prompt text's SHA-256; a step
        whose reply has no readable verdict is null, never 0."""
        incoming = RewardRequestSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        project = project_get_for_user(request.user, data["project"])
        scorer = _scorer(project, data["scorer"])
        _store_check(request, project, data["store"])
        try:
            trajectories = trajectories_parse(data["trajectories"])
        except RewardInputError as error:
            raise ValidationError({error.field: [error.message]}) from None
        result = _rewards(
            request,
            project=project,
            scorer=scorer,
            trajectories=trajectories,
            aggregate=data["aggregate"],
            credit=data["credit"],
            timeout=data.get("timeout"),
            store=data["store"],
            prompt_version=data.get("prompt_version"),
        )
        if isinstance(result, Response):
            return result
        body: dict[str, Any] = {
            "scorer": scorer.name,
            "scorer_id": scorer.pk,
            "revision": result.revision,
            "aggregate": result.aggregate,
            "rewards": result.rewards,
            "truncated_steps": result.truncated,
        }
        if result.prompt is not None:
            body["judge"] = judge_revision(scorer, result.prompt)
        if data["store"]:
            body["stored"] = {"import": result.import_batch, "scores": result.stored_scores}
        return Response(body)


class OpenRLHFRewardsView(APIView):
    authentication_classes = [QueryTokenAuthentication, *APIView.authentication_classes]

    @extend_schema(
        request=OpenRLHFBodySerializer,
        responses={200: dict[str, Any]},
        parameters=[
            OpenApiParameter("project", str, required=True),
            OpenApiParameter("scorer", str, required=True, description=SCORER_HELP),
            OpenApiParameter("prompt_version", int, description="an llm-judge's prompt version"),
            OpenApiParameter("aggregate", str, enum=list(AGGREGATES)),
            OpenApiParameter("separator", str, description="default: a blank line"),
            OpenApiParameter("timeout", float),
            OpenApiParameter("store", bool),
            OpenApiParameter("token", str, description="the API token, for OpenRLHF"),
        ],
    )
    def post(self, request: Request) -> Response:
        """OpenRLHF's remote reward model (``--remote_rm_url``): each ``query`` is a
        prompt and its response; the response is cut into steps at ``separator``, the
        steps scored, and ``rewards`` holds each query's ``aggregate`` (0 where no step
        could be scored); ``scores`` holds each query's step values."""
        params = OpenRLHFParamsSerializer(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        options = params.validated_data
        body = OpenRLHFBodySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        project = project_get_for_user(request.user, options["project"])
        scorer = _scorer(project, options["scorer"])
        _store_check(request, project, options["store"])
        try:
            trajectories = openrlhf_parse(
                data["query"], data.get("prompts"), separator=options["separator"]
            )
        except RewardInputError as error:
            raise ValidationError({error.field: [error.message]}) from None
        for trajectory, label in zip(trajectories, data.get("labels") or [], strict=False):
            if isinstance(label, str):
                trajectory.ground_truth = label
        result = _rewards(
            request,
            project=project,
            scorer=scorer,
            trajectories=trajectories,
            aggregate=options["aggregate"],
            credit="none",
            timeout=options.get("timeout"),
            store=options["store"],
            prompt_version=options.get("prompt_version"),
        )
        if isinstance(result, Response):
            return result
        rewards = [r["reward"] if r["reward"] is not None else 0.0 for r in result.rewards]
        return Response(
            {
                "rewards": rewards,
                "scores": [r["steps"] for r in result.rewards],
                "scorer": scorer.name,
                "revision": result.revision,
            }
        )


urlpatterns: list[URLPattern] = [
    path("rewards/", RewardsView.as_view(), name="rewards"),
    path("rewards/openrlhf/", OpenRLHFRewardsView.as_view(), name="rewards-openrlhf"),
]
