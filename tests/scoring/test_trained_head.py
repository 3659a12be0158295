"""The embedded scorer: the real offline MiniLM encoder and a head trained on ProcessBench
GSM8K's human step labels, measured on tasks it never saw."""

from __future__ import annotations

import pytest

from scoring import prm, services
from scoring.models import ScoringRun
from tests.conftest import REALDATA
from trajectories.models import Project
from trajectories.services import trajectory_import

pytestmark = pytest.mark.django_db


def test_trained_head_beats_chance_on_held_out_processbench_tasks(project: Project) -> None:
    trajectory_import(
        project=project, source_format="processbench", path=REALDATA / "processbench" / "gsm8k.json"
    )
    # Short inputs keep this test quick on a CPU: the step alone, its last 32 tokens.
    run = services.scorer_train_start(
        project=project,
        name="head",
        encoder=prm.DEFAULT_ENCODER,
        parameters={"max_length": 32, "context_steps": 0, "include_task": False},
        holdout=0.3,
    )
    run = services.scorer_train_run(run_id=run.pk)  # what the Celery task calls
    assert run.status == ScoringRun.Status.DONE, run.error
    metrics = run.metrics
    # ProcessBench labels every step up to the first error: 1568 labeled steps, 207 bad.
    assert metrics["train_steps"] + metrics["heldout_steps"] == 1568
    assert metrics["heldout_bad"] >= 40
    assert metrics["auroc"] > 0.57, metrics  # chance is 0.5; this split gives about 0.61
    assert 0 < metrics["f1"] <= 1
    assert metrics["processbench_f1"] is not None
    assert metrics["heldout_trajectories"] > 80
    head = run.scorer
    assert head is not None and head.kind == prm.TRAINED_HEAD and head.revision == "1"
    assert head.artifact is not None
    assert len(head.artifact["head"]["weights"]) == 384  # MiniLM's embedding width
    assert head.artifact["metrics"] == metrics
