"""The reward service's web side: check the scorer, queue the request for a reward worker
(``scoring/rewards/``), wait for its answer until the caller's deadline, fold the step
values into rewards, and, when asked, store the scored rollouts in the project.

Nothing here runs a model or asks a judge: the worker does, with the model loaded once
per process. A judge asks with one prompt version (the newest unless told); its revision
is the model and the version's number and text digest (:func:`judge_revision`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from scoring import prm
from scoring.judges.config import JudgeError
from scoring.judges.modes import Prompt
from scoring.models import JudgePrompt, Scorer, ScoringRun
from scoring.rewards.channel import Refusal, RewardChannel, redis_connect
from scoring.rewards.inputs import rewards_fold, scorer_inputs
from scoring.rewards.serve import judge_wire, scorer_wire, trajectories_wire
from scoring.services.judges import judge_params_for, judge_prompt_for_run, judge_spec
from scoring.services.runners import ScoringError, scorer_spec
from scoring.services.scores import scores_upsert
from trajectories.formats import stepscope
from trajectories.formats.base import ParsedTrajectory
from trajectories.hashing import content_hash
from trajectories.models import Project, Step
from trajectories.services import trajectory_records_import


class RewardRefused(Exception):
    """A request the service does not answer with rewards: its HTTP ``status``, the
    message, the field at fault ("" for none) and, for a 503, when to try again."""

    def __init__(
        self, status: int, message: str, *, field: str = "", retry_after: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.retry_after = retry_after


@dataclass(frozen=True)
class Rewards:
    scorer: Scorer
    aggregate: str
    rewards: list[dict[str, Any]]
    truncated: int
    # The import that stored the rollouts (``store``), else None.
    import_batch: int | None = None
    stored_scores: int = 0
    # A judge's prompt version it asked with; None for a model scorer.
    prompt: JudgePrompt | None = None

    @property
    def revision(self) -> str:
        """What the values were computed with: the scorer's revision, or a judge's model,
        prompt version and prompt digest."""
        if self.prompt is None:
            return self.scorer.revision
        return judge_revision(self.scorer, self.prompt)["revision"]


def reward_channel() -> RewardChannel:
    """This process's channel to the reward workers, on the broker's Redis, under the
    broker's key prefix."""
    return _channel(settings.CELERY_BROKER_URL, settings.BROKER_KEY_PREFIX)


@lru_cache(maxsize=4)
def _channel(url: str, prefix: str) -> RewardChannel:
    # One connection pool per process, shared by its threads.
    return RewardChannel(redis_connect(url), prefix=prefix)


def judge_revision(scorer: Scorer, prompt: JudgePrompt) -> dict[str, Any]:
    """A judge's revision as the reward answer gives it: the model (and its hub revision),
    the prompt version and the SHA-256 of its system and template text, and all of it as
    one string (``model[@revision]#prompt-v<N>:<digest's first 12>``)."""
    digest = hashlib.sha256(json.dumps([prompt.system, prompt.template]).encode()).hexdigest()
    model = scorer.model_ref + (f"@{scorer.revision}" if scorer.revision else "")
    return {
        "revision": f"{model}#prompt-v{prompt.version}:{digest[:12]}",
        "model": scorer.model_ref,
        "model_revision": scorer.revision,
        "mode": judge_params_for(scorer).mode,
        "prompt_version": prompt.version,
        "prompt_sha256": digest,
    }


def reward_scorer_check(scorer: Scorer, *, prompt_version: int | None = None) -> JudgePrompt | None:
    """Refuse (400, naming the scorer) one the reward service cannot run: imported scores
    (no model), a judge that names failing steps instead of scoring them, one not ready
    (a head never trained), a prompt version for a scorer without prompts or one the
    judge does not have. A judge's prompt version to ask with is returned."""
    kind = prm.kind_get(scorer.kind)
    if not kind.runs:
        raise RewardRefused(
            400,
            f"scorer {scorer.name!r} is of kind {scorer.kind}: its scores were computed"
            " elsewhere and imported, so there is nothing here to score new steps with; ask"
            " with a PRM, a trained head or an llm-judge of the project",
            field="scorer",
        )
    if not kind.prompts:
        if prompt_version is not None:
            raise RewardRefused(
                400,
                f"scorer {scorer.name!r} is of kind {scorer.kind}; only an llm-judge asks"
                " with a prompt version",
                field="prompt_version",
            )
        if not kind.build:
            raise RewardRefused(
                400,
                f"scorer {scorer.name!r} is of kind {scorer.kind}; the reward service runs"
                " PRMs, trained heads and llm-judges",
                field="scorer",
            )
        problem = kind.run_check(scorer)
        if problem:
            raise RewardRefused(400, problem, field="scorer")
        return None
    try:
        params = judge_params_for(scorer)
    except JudgeError as error:  # parameters saved before a check they now fail
        raise RewardRefused(400, f"judge {scorer.name!r}: {error}", field="scorer") from None
    if not params.values_steps:
        raise RewardRefused(
            400,
            f"judge {scorer.name!r} is in mode {params.mode}: it names the decisive step of a"
            " failed log or fills a rubric, not a value per step; rewards need a per-step or"
            " trajectory judge",
            field="scorer",
        )
    try:
        return judge_prompt_for_run(scorer, prompt_version)
    except ScoringError as error:
        field = "prompt_version" if prompt_version else "scorer"
        raise RewardRefused(400, str(error), field=field) from None


def rewards_compute(
    *,
    project: Project,
    scorer: Scorer,
    trajectories: Sequence[ParsedTrajectory],
    aggregate: str,
    credit: str = "none",
    timeout_s: float,
    store: bool = False,
    user: User | None = None,
    prompt_version: int | None = None,
) -> Rewards:
    """Score ``trajectories`` with ``scorer`` (a model, or a judge asking with its prompt
    ``prompt_version``, the newest by default) on a reward worker and fold each into one
    reward by ``aggregate``; :class:`RewardRefused` for a scorer it cannot run (400), no
    worker or a full queue (503), a judge endpoint that fails (502), no answer within
    ``timeout_s`` (504)."""
    prompt = reward_scorer_check(scorer, prompt_version=prompt_version)
    try:
        wire = _scorer_wire(scorer, prompt)
    except prm.ScorerError as error:
        raise RewardRefused(400, f"scorer {scorer.name!r}: {error}", field="scorer") from None
    deadline = time.time() + timeout_s
    channel = reward_channel()
    queued = channel.submit(
        {
            "scorer": wire,
            "trajectories": trajectories_wire(scorer_inputs(trajectories)),
            "deadline": deadline,
        },
        max_depth=settings.STEPSCOPE_REWARDS_MAX_QUEUE,
    )
    if isinstance(queued, Refusal):
        raise RewardRefused(queued.status, queued.message, retry_after=queued.retry_after)
    answer = channel.wait(queued, deadline=deadline)
    if answer is None:
        raise RewardRefused(
            504,
            f"no rewards within the deadline of {timeout_s:g} s: the reward workers are"
            " busy or the batch is large; give a longer timeout or fewer trajectories",
        )
    if "error" in answer:
        status = int(answer["status"])
        field = "scorer" if status == 400 else ""
        raise RewardRefused(status, str(answer["error"]), field=field)
    folded = [r.to_dict() for r in rewards_fold(answer["steps"], how=aggregate, credit=credit)]
    result = Rewards(scorer, aggregate, folded, int(answer["truncated"]), prompt=prompt)
    if store:
        return rewards_store(
            project=project, scorer=scorer, trajectories=trajectories, result=result, user=user
        )
    return result


def _scorer_wire(scorer: Scorer, prompt: JudgePrompt | None) -> dict[str, Any]:
    if prompt is None:
        return scorer_wire(scorer_spec(scorer), key=f"{scorer.pk}@{scorer.revision}")
    spec = judge_spec(scorer)
    return judge_wire(
        spec,
        Prompt(prompt.system, prompt.template),
        key=f"judge:{scorer.pk}:p{prompt.pk}:{spec.key}",
        name=scorer.name,
    )


def rewards_store(
    *,
    project: Project,
    scorer: Scorer,
    trajectories: Sequence[ParsedTrajectory],
    result: Rewards,
    user: User | None,
) -> Rewards:
    """The scored rollouts into ``project`` through the push import (a rollout stored
    before changes nothing), and their step values as the scorer's scores, in one
    transaction: all of it or none."""
    with transaction.atomic():
        records = [stepscope.to_record(t) for t in trajectories]
        batch = trajectory_records_import(project=project, records=records, user=user)
        step_ids = _step_ids(project, records)
        values = [
            prm.StepResult(step_ids[(t_index, s_index)], value)
            for t_index, reward in enumerate(result.rewards)
            for s_index, value in enumerate(reward["steps"])
            if value is not None and (t_index, s_index) in step_ids
        ]
        run = ScoringRun.objects.create(
            project=project,
            scorer=scorer,
            prompt=result.prompt,
            metrics=(
                {"mode": judge_params_for(scorer).mode, "prompt_version": result.prompt.version}
                if result.prompt is not None
                else {}
            ),
            kind=ScoringRun.Kind.SCORE,
            status=ScoringRun.Status.DONE,
            selection={"rewards": True, "import_batch": batch.pk},
            created_by=user,
            started_at=timezone.now(),
            finished_at=timezone.now(),
            total=len(values),
            done=len(values),
        )
        stored = scores_upsert(run=run, scorer_id=scorer.pk, results=values)
    return Rewards(
        result.scorer,
        result.aggregate,
        result.rewards,
        result.truncated,
        batch.pk,
        stored,
        result.prompt,
    )


def _step_ids(project: Project, records: Sequence[dict[str, Any]]) -> dict[tuple[int, int], int]:
    """(position in the request, step index) -> step id, through each record's content
    hash as the push import computes it (a re-sent rollout keeps its hash and rows)."""
    by_hash = {}
    for position, parsed in enumerate(stepscope.parse_records(records)):
        if isinstance(parsed, ParsedTrajectory):
            by_hash[content_hash(parsed, "stepscope")] = position
    rows = Step.objects.filter(
        trajectory__project=project, trajectory__content_hash__in=list(by_hash)
    ).values_list("trajectory__content_hash", "index", "pk")
    return {(by_hash[digest], index): pk for digest, index, pk in rows}
