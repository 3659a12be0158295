"""Celery tasks for scoring and attribution: thin wrappers that take ids and call a service.
Every task carries the job retry policy (:mod:`stepscope.jobs.retry`)."""

from __future__ import annotations

from celery import shared_task

from scoring import services
from stepscope.jobs.retry import REDELIVERABLE


@shared_task(name="scoring.plan_run", **REDELIVERABLE)
def plan_run(run_id: int) -> None:
    services.scoring_run_plan(run_id=run_id)


@shared_task(name="scoring.score_chunk", **REDELIVERABLE)
def score_chunk(chunk_id: int) -> None:
    services.scoring_chunk_score(chunk_id=chunk_id)


@shared_task(name="scoring.train_head", **REDELIVERABLE)
def train_head(run_id: int) -> None:
    services.scorer_train_run(run_id=run_id)


@shared_task(name="scoring.attribution_plan", **REDELIVERABLE)
def attribution_plan(run_id: int) -> None:
    services.attribution_run_plan(run_id=run_id)


@shared_task(name="scoring.attribution_chunk", **REDELIVERABLE)
def attribution_chunk(chunk_id: int) -> None:
    services.attribution_chunk_run(chunk_id=chunk_id)
