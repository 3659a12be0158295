"""Celery tasks for rollouts: thin wrappers that take ids and call a service.
Every task carries the job retry policy (:mod:`stepscope.jobs.retry`)."""

from __future__ import annotations

from celery import shared_task

from rollouts import services
from rollouts.services.demo import demo_policy_training_run
from stepscope.jobs.retry import REDELIVERABLE


@shared_task(name="rollouts.plan_job", **REDELIVERABLE)
def plan_job(job_id: int) -> None:
    services.rollout_job_plan(job_id=job_id)


@shared_task(name="rollouts.run_chunk", **REDELIVERABLE)
def run_chunk(chunk_id: int) -> None:
    services.rollout_chunk_run(chunk_id=chunk_id)


@shared_task(name="rollouts.train_demo_policy", **REDELIVERABLE)
def train_demo_policy(training_id: int) -> None:
    demo_policy_training_run(training_id=training_id)
