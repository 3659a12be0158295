"""A trainer's rollouts stay task groups: the group-relative credit Stepscope computes on
a TRL GRPO completions table (from a real run of a tiny model) gives back the advantage
the trainer itself used for each completion."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from scoring import services
from scoring.models import AttributionRun, StepCredit
from tests.grpo_tiny import grpo_train
from trajectories.models import Project, Step
from trajectories.services import trajectory_import

pytestmark = pytest.mark.django_db


def test_grpo_credit_on_imported_trl_rollouts_is_the_trainers_advantage(
    project: Project, tmp_path: Path
) -> None:
    table = grpo_train(tmp_path, steps=1) / "completions" / "completions_00001.parquet"
    trajectory_import(project=project, source_format="trl-completions", path=table)
    run = services.attribution_run_start(project=project, method="group-relative")
    services.attribution_run_plan(run_id=run.pk)
    for chunk_id in run.chunks.values_list("pk", flat=True):
        services.attribution_chunk_run(chunk_id=chunk_id)
    run.refresh_from_db()
    assert run.status == AttributionRun.Status.DONE, run.error

    answers = Step.objects.filter(trajectory__project=project, index=1)
    credit = dict(
        StepCredit.objects.filter(run=run, step__in=answers).values_list("step_id", "value")
    )
    used = {step.pk: step.advantage for step in answers}
    assert len(credit) == len(used) == len(pq.read_table(table)) == 4
    # TRL divides by the group's std + 1e-4, Stepscope by std + 1e-6: the same to 1e-3.
    for step_id, advantage in used.items():
        assert credit[step_id] == pytest.approx(advantage, rel=1e-3, abs=1e-3)
