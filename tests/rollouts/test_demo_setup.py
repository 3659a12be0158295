"""The demo's rollouts (``python manage.py demo_setup``): the command returns at once and
leaves the demo policy's training to a worker, which registers the policy and queues two
rollout jobs over a few of the demo's tasks against the generated ground truth; running
one records how its MC labels agree with that truth. Training is cut to a step or two
here (the real run takes minutes), and the real-data projects are left out."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import Client

from demo.management.commands import demo_setup
from rollouts import demo_policy
from rollouts.models import DemoPolicyTraining, Policy, RolloutJob
from rollouts.services import demo, rollout_job_cancel
from rollouts.services.demo import DEMO_K, demo_policy_training_run
from stepscope.locks import LockClass
from tests.conftest import celery_worker_log
from tests.rollouts.test_services import run_job
from tests.waiting import wait_until
from trajectories import synthetic
from trajectories.models import Project
from trajectories.services import imports


@pytest.fixture
def demo_dirs(tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.DATA_DIR = tmp_path
    settings.MODELS_DIR = tmp_path / "models"
    monkeypatch.setattr(demo_setup, "REAL_PROJECTS", [])


def setup_demo(**options: Any) -> dict[str, Any]:
    out = StringIO()
    options.setdefault("no_showcase", True)  # the showcase is tests/demo's
    call_command("demo_setup", tasks=3, rollout_tasks=2, stdout=out, **options)
    summary: dict[str, Any] = json.loads(out.getvalue().strip().splitlines()[-1])
    return summary


@pytest.fixture
def statistics_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """For the tests that count what a setup queues on commit: whether its import grew a
    table enough to be analysed depends on how full earlier tests left the tables."""
    monkeypatch.setattr(imports, "analyze_when_grown", lambda later=None: [])


def training_queued(callbacks: list[Any]) -> list[Any]:
    """The on-commit callbacks that queue the demo policy's training."""
    return [c for c in callbacks if "demo_policy_training_start" in c.__qualname__]


@pytest.mark.django_db
@pytest.mark.usefixtures("demo_dirs", "statistics_left_alone")
def test_demo_setup_leaves_training_to_the_worker_then_queues_rollouts_against_the_truth(
    monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    trained = []
    real_train = demo_policy.train

    def quick(out_dir: Path, **options: Any) -> demo_policy.TrainingReport:
        trained.append(out_dir)
        # Capped in time: `make run` shows the Monte Carlo values within ten minutes.
        assert options["minutes"] <= 7
        options["progress"](0.5)
        return real_train(out_dir, max_steps=1, batch_size=2, layers=1, hidden=32)

    monkeypatch.setattr(demo_policy, "train", quick)
    with django_capture_on_commit_callbacks() as queued:
        first = setup_demo()
    # Beside the import's own (search indexing, the arrival of its trajectories): the
    # training, once.
    assert len(training_queued(queued)) == 1, "the training goes to the queue"
    assert trained == [] and first["rollout_jobs"] == []
    training = DemoPolicyTraining.objects.get(pk=first["policy_training"])
    assert (training.status, training.percent) == (DemoPolicyTraining.Status.QUEUED, 0)
    with django_capture_on_commit_callbacks() as queued_again:
        assert setup_demo()["policy_training"] == training.pk
    assert len(training_queued(queued_again)) == 1, "a second run queues the same training again"

    demo_policy_training_run(training_id=training.pk)
    training.refresh_from_db()
    assert (training.status, training.percent) == (DemoPolicyTraining.Status.DONE, 100)
    assert len(trained) == 1
    policy = Policy.objects.get(name="demo-policy", project=None)
    project = Project.objects.get(slug="demo")
    jobs = list(RolloutJob.objects.filter(project=project).order_by("pk"))
    assert [job.mode for job in jobs] == [RolloutJob.Mode.ALL, RolloutJob.Mode.SEARCH]
    two_tasks = set(
        project.trajectories.filter(task_key__in=["arith-7-0", "arith-7-1"]).values_list(
            "pk", flat=True
        )
    )
    assert len(two_tasks) == 8
    for job in jobs:
        assert (job.policy, job.k, job.status) == (policy, DEMO_K, "queued")
        assert job.created_by is not None and job.created_by.username == demo_setup.DEMO_USER
        assert set(job.selection["trajectory_ids"]) == two_tasks
        assert job.options["against"] == synthetic.TRUTH_ANNOTATOR

    again = setup_demo()
    assert again["rollout_jobs"] == [] and again["policy_training"] is None
    assert len(trained) == 1, "a trained policy is reused"

    # What the worker does with the first: MC labels on every step, compared with the
    # imported truth labels by name.
    done = run_job(jobs[0])
    assert done.status == RolloutJob.Status.DONE, done.error
    agreement = done.result["agreement"]
    assert agreement["against"] == "import:synthetic-truth"
    assert agreement["steps_compared"] > 0 and "error" not in agreement


@pytest.mark.django_db
@pytest.mark.usefixtures("demo_dirs", "statistics_left_alone")
def test_a_failed_training_is_shown_and_tried_again(
    monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    def broken(out_dir: Path, **options: Any) -> demo_policy.TrainingReport:
        raise OSError("disk full")

    monkeypatch.setattr(demo_policy, "train", broken)
    with django_capture_on_commit_callbacks():
        training_id = setup_demo()["policy_training"]
    with pytest.raises(OSError):
        demo_policy_training_run(training_id=training_id)
    failed = DemoPolicyTraining.objects.get(pk=training_id)
    assert failed.status == DemoPolicyTraining.Status.FAILED
    assert failed.error == "OSError: disk full"
    client = Client()
    client.force_login(User.objects.get(username="demo"))
    page = client.get("/p/demo/rollouts/").content.decode()
    assert "Training the demo policy failed: OSError: disk full" in page
    with django_capture_on_commit_callbacks() as queued:
        assert setup_demo()["policy_training"] == training_id
    assert len(queued) == 1
    failed.refresh_from_db()
    assert failed.status == DemoPolicyTraining.Status.QUEUED, "tried again"


# Not a transactional test: there the queued task would reach a real worker, which would
# train the policy for minutes under the next test's feet.
@pytest.mark.django_db
@pytest.mark.usefixtures("demo_dirs")
def test_a_training_another_worker_holds_is_left_to_it(
    monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    """A second delivery of the task (a second `make run` queues it again) does nothing
    while the worker that has the training's lock lives, and trains once it is gone."""
    trained = []
    monkeypatch.setattr(demo_policy, "train", lambda out_dir, **options: trained.append(out_dir))
    monkeypatch.setattr(demo, "demo_rollouts_queue", lambda **options: [])
    with django_capture_on_commit_callbacks():
        training_id = setup_demo()["policy_training"]
    settings_dict = connection.settings_dict
    other = psycopg.connect(
        dbname=settings_dict["NAME"],
        user=settings_dict["USER"],
        host=settings_dict["HOST"],
        port=settings_dict["PORT"],
    )
    with other:
        lock = (int(LockClass.DEMO_TRAINING), training_id)
        other.execute("SELECT pg_advisory_lock(%s, %s)", lock)
        demo_policy_training_run(training_id=training_id)
        assert trained == []
        assert DemoPolicyTraining.objects.get(pk=training_id).status == "queued"
    demo_policy_training_run(training_id=training_id)
    assert len(trained) == 1
    assert DemoPolicyTraining.objects.get(pk=training_id).status == "done"


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("demo_dirs")
def test_the_worker_trains_the_policy_while_the_page_shows_its_progress(
    celery_worker: object,
) -> None:
    summary = setup_demo(policy_steps=2)
    training_id = summary["policy_training"]
    client = Client()
    client.force_login(User.objects.get(username="demo"))
    section = client.get("/p/demo/rollouts/", headers={"HX-Request": "true"}).content.decode()
    assert "Training the demo policy:" in section
    assert 'hx-trigger="every 3s"' in section, "the section polls while it trains"

    def trained() -> bool:
        status = DemoPolicyTraining.objects.get(pk=training_id).status
        assert status != DemoPolicyTraining.Status.FAILED
        return status == DemoPolicyTraining.Status.DONE

    assert wait_until(trained, timeout=180), celery_worker_log()
    jobs = list(RolloutJob.objects.filter(project__slug="demo"))
    assert len(jobs) == 2
    for job in jobs:
        rollout_job_cancel(job=job)
    section = client.get("/p/demo/rollouts/", headers={"HX-Request": "true"}).content.decode()
    assert "Training the demo policy" not in section
    assert all(f"rollout-job-{job.pk}" in section for job in jobs)
