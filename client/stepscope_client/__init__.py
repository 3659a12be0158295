"""A small client for Stepscope's REST API: push trajectories, labels and step scores,
upload files, start scoring, judge, attribution and rollout runs and read their results,
run exports into versioned batches and fetch a pinned version, and wait on jobs, from a
training script."""

from stepscope_client.batches import BatchFiles
from stepscope_client.client import Client, PushResult, ScoresResult
from stepscope_client.errors import StepscopeError
from stepscope_client.jobs import Job, ProgressBar

__all__ = [
    "BatchFiles",
    "Client",
    "Job",
    "ProgressBar",
    "PushResult",
    "ScoresResult",
    "StepscopeError",
]
__version__ = "0.1.0"
