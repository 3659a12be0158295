"""The reward service's web side: check the scorer, queue the request for a reward worker
(``scoring/rewards/``), wait for its answer until the caller's deadline, fold the step
values into rewards, and, when asked, store the scored rollouts in the project.

Nothing here runs a model: the worker does, with the model loaded once per process.
"""

from __future__ import annotations

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
from scoring.models import Scorer, ScoringRun
from scoring.rewards.channel import Refusal, RewardChannel, redis_connect
from scoring.rewards.inputs import rewards_fold, scorer_inputs
from scoring.rewards.serve import scorer_wire, trajectories_wire
from scoring.services.runners import scorer_spec
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


def reward_channel() -> RewardChannel:
    """This process's channel to the reward workers, on the broker's Redis, under the
    broker's key prefix."""
    return _channel(settings.CELERY_BROKER_URL, settings.BROKER_KEY_PREFIX)


@lru_cache(maxsize=4)
def _channel(url: str, prefix: str) -> RewardChannel:
    # One connection pool per process, shared by its threads.
    return RewardChannel(redis_connect(url), prefix=prefix)


def reward_scorer_check(scorer: Scorer) -> None:
    """Refuse (400, naming the scorer) one the reward service cannot run: a kind with no
    model to load here (imported scores, LLM judges) or one not ready (a head never
    trained)."""
    kind = prm.kind_get(scorer.kind)
    if not kind.build or not kind.runs:
        raise RewardRefused(
            400,
            f"scorer {scorer.name!r} is of kind {scorer.kind}; the reward service runs model"
            " scorers (PRM kinds and trained heads)",
            field="scorer",
        )
    problem = kind.run_check(scorer)
    if problem:
        raise RewardRefused(400, problem, field="scorer")


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
) -> Rewards:
    """Score ``trajectories`` with ``scorer`` on a reward worker and fold each into one
    reward by ``aggregate``; :class:`RewardRefused` for a scorer it cannot run (400), no
    worker or a full queue (503), no answer within ``timeout_s`` (504)."""
    reward_scorer_check(scorer)
    try:
        spec = scorer_spec(scorer)
    except prm.ScorerError as error:
        raise RewardRefused(400, f"scorer {scorer.name!r}: {error}", field="scorer") from None
    deadline = time.time() + timeout_s
    channel = reward_channel()
    queued = channel.submit(
        {
            "scorer": scorer_wire(spec, key=f"{scorer.pk}@{scorer.revision}"),
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
        raise RewardRefused(int(answer["status"]), str(answer["error"]), field="scorer")
    folded = [r.to_dict() for r in rewards_fold(answer["steps"], how=aggregate, credit=credit)]
    result = Rewards(scorer, aggregate, folded, int(answer["truncated"]))
    if store:
        return rewards_store(
            project=project, scorer=scorer, trajectories=trajectories, result=result, user=user
        )
    return result


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
        result.scorer, result.aggregate, result.rewards, result.truncated, batch.pk, stored
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
