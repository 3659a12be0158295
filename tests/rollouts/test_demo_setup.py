"""The demo's rollouts (``python manage.py demo_setup``): the demo policy is trained once
and registered, and two rollout jobs over a few of the demo's tasks are queued against
the generated ground truth; running one records how its MC labels agree with that truth.
Training is cut to one step here (the real run takes minutes), and the real-data
projects are left out."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from rollouts import demo_policy
from rollouts.models import Policy, RolloutJob
from tests.rollouts.test_services import run_job
from trajectories import synthetic
from trajectories.management.commands import demo_setup
from trajectories.models import Project

pytestmark = pytest.mark.django_db


def test_demo_setup_trains_once_and_queues_rollouts_against_the_truth(
    tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.DATA_DIR = tmp_path
    monkeypatch.setattr(demo_setup, "REAL_PROJECTS", [])
    trained = []
    real_train = demo_policy.train

    def quick(out_dir: Path, **options: object) -> demo_policy.TrainingReport:
        trained.append(out_dir)
        return real_train(out_dir, max_steps=1, batch_size=2, layers=1, hidden=32)

    monkeypatch.setattr(demo_policy, "train", quick)
    summaries = []
    for _ in range(2):
        out = StringIO()
        call_command("demo_setup", tasks=3, rollout_tasks=2, stdout=out)
        summaries.append(json.loads(out.getvalue().strip().splitlines()[-1]))

    assert len(trained) == 1, "the second run reuses the trained policy"
    policy = Policy.objects.get(name="demo-policy", project=None)
    project = Project.objects.get(slug="demo")
    jobs = list(RolloutJob.objects.filter(project=project).order_by("pk"))
    assert summaries[0]["rollout_jobs"] == [job.pk for job in jobs]
    assert summaries[1]["rollout_jobs"] == [], "the second run queues nothing more"
    assert [job.mode for job in jobs] == [RolloutJob.Mode.ALL, RolloutJob.Mode.SEARCH]
    two_tasks = set(
        project.trajectories.filter(task_key__in=["arith-7-0", "arith-7-1"]).values_list(
            "pk", flat=True
        )
    )
    assert len(two_tasks) == 8
    for job in jobs:
        assert (job.policy, job.k, job.status) == (policy, demo_setup.DEMO_K, "queued")
        assert job.created_by is not None and job.created_by.username == demo_setup.DEMO_USER
        assert set(job.selection["trajectory_ids"]) == two_tasks
        assert job.options["against"] == synthetic.TRUTH_ANNOTATOR

    # What the worker does with the first: MC labels on every step, compared with the
    # imported truth labels by name.
    done = run_job(jobs[0])
    assert done.status == RolloutJob.Status.DONE, done.error
    agreement = done.result["agreement"]
    assert agreement["against"] == "import:synthetic-truth"
    assert agreement["steps_compared"] > 0 and "error" not in agreement
