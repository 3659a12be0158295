"""Writes for rollouts, by topic: policies, jobs (start, plan, cancel) and chunks (the
work on a worker). The names below are the app's service interface; callers import
them from here. torch and transformers are imported lazily, inside the functions that
run on workers, so the web process never loads them."""

from rollouts.services.chunks import mc_upsert, prefix_steps, rollout_chunk_run
from rollouts.services.jobs import (
    MAX_K,
    job_summary,
    rollout_job_cancel,
    rollout_job_fail,
    rollout_job_plan,
    rollout_job_start,
    rollout_job_stop,
)
from rollouts.services.policies import RolloutError, policy_check, policy_create, policy_spec

__all__ = [
    "MAX_K",
    "RolloutError",
    "job_summary",
    "mc_upsert",
    "policy_check",
    "policy_create",
    "policy_spec",
    "prefix_steps",
    "rollout_chunk_run",
    "rollout_job_cancel",
    "rollout_job_fail",
    "rollout_job_plan",
    "rollout_job_start",
    "rollout_job_stop",
]
