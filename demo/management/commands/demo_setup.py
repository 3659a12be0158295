"""Create the demo user and projects for `make run`; safe to run again, and quick, so the
web server starts at once.

Each demo project shows every view with data, without a command typed
(:mod:`demo.showcase`): a labeling queue with an item leased to the demo user at once,
then on the worker a trained head and a small PRM scoring every step, credit runs and one
export of each main format (``--no-showcase`` leaves them out).

The demo project also shows rollouts end to end. What takes minutes runs on the worker
that `make run` starts next: the demo policy is trained on its first run
(``rollouts.services.demo``; its weights are kept under the data directory and reused),
then two rollout jobs on a few of the demo's tasks are queued: Monte Carlo labels for
every step, and a first-error search on the failures, both compared with the generated
ground truth when they finish. The project's rollouts section shows the progress.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from demo import showcase
from rollouts.services.demo import (
    DEMO_SEED,
    demo_policy_report,
    demo_policy_training_start,
    demo_rollouts_queue,
)
from trajectories import synthetic
from trajectories.models import Membership, Project
from trajectories.services import ImportRejected, membership_set, project_create, trajectory_import

# How many of the demo's tasks (each with four rollouts) the rollout jobs cover; about a
# minute of CPU each on the worker.
DEMO_ROLLOUT_TASKS = 6
DEMO_USER = "demo"
DEMO_PASSWORD = "demo"
REALDATA = settings.BASE_DIR.parent / "shared" / "realdata"
# The demo projects that get the showcase, and the label source their truth is under.
SHOWCASE_LABELS = {"demo": synthetic.TRUTH_ANNOTATOR, "processbench-gsm8k": "import:processbench"}
REAL_PROJECTS = [
    ("processbench-gsm8k", "ProcessBench GSM8K", "processbench", "processbench/gsm8k.json"),
    (
        "tau-bench-airline",
        "tau-bench airline (GPT-4o)",
        "openai-messages",
        "tau_bench/gpt-4o-airline.json",
    ),
]


class Command(BaseCommand):
    help = (
        "Create a demo login and projects: synthetic arithmetic rollouts and, when"
        " ../shared/realdata is there, real data."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--tasks", type=int, default=50)
        parser.add_argument(
            "--rollout-tasks",
            type=int,
            default=DEMO_ROLLOUT_TASKS,
            help="demo tasks to queue rollout jobs for (0: no policy, no rollouts)",
        )
        parser.add_argument(
            "--no-showcase",
            action="store_true",
            help="no queue, scorers, credit runs or exports made for the demo projects",
        )
        parser.add_argument(
            "--policy-steps",
            type=int,
            default=1200,
            help="training steps of the demo policy, when it is not trained yet",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(username=DEMO_USER)
        if created:
            user.set_password(DEMO_PASSWORD)
            user.save()

        imports: dict[str, int] = {}
        demo_file = Path(settings.DATA_DIR) / "demo-arithmetic.jsonl"
        synthetic.write_jsonl(demo_file, synthetic.rollouts(tasks=options["tasks"], seed=DEMO_SEED))
        sources = [("demo", "Demo: arithmetic rollouts", "stepscope", demo_file)]
        sources += [(slug, name, fmt, REALDATA / rel) for slug, name, fmt, rel in REAL_PROJECTS]
        for slug, name, source_format, path in sources:
            if not path.is_file():
                continue
            project = Project.objects.filter(slug=slug).first() or project_create(
                slug=slug, name=name
            )
            membership_set(project=project, user=user, role=Membership.Role.ADMIN)
            try:
                batch = trajectory_import(project=project, source_format=source_format, path=path)
            except ImportRejected as rejected:
                self.stderr.write(f"{path}: {rejected}")
                continue
            imports[slug] = batch.created_count
            if not options["no_showcase"] and slug in SHOWCASE_LABELS:
                showcase.showcase_queue(project=project, user=user)
                _showcase_queue_on_commit(project.pk, user.pk, SHOWCASE_LABELS[slug])

        jobs: list[int] = []
        training: int | None = None
        demo = Project.objects.filter(slug="demo").first()
        if demo is not None and options["rollout_tasks"] > 0:
            tasks = options["rollout_tasks"]
            if demo_policy_report() is not None:
                queued = demo_rollouts_queue(project=demo, user=user, tasks=tasks)
                jobs = [job.pk for job in queued]
                if jobs:
                    self.stdout.write(f"Queued rollout jobs {jobs} on the demo project")
            else:
                training = demo_policy_training_start(
                    project=demo, user=user, tasks=tasks, max_steps=options["policy_steps"]
                ).pk
                self.stdout.write(
                    "The worker trains the demo policy (a few minutes on a CPU), then runs"
                    " the demo's rollouts; the demo project's page shows the progress"
                )

        self.stdout.write("Stepscope is at http://127.0.0.1:8000/")
        self.stdout.write(f"Log in as {DEMO_USER} / {DEMO_PASSWORD}")
        summary = {
            "user": DEMO_USER,
            "created": imports,
            "rollout_jobs": jobs,
            "policy_training": training,
        }
        self.stdout.write(json.dumps(summary))


def _showcase_queue_on_commit(project_id: int, user_id: int, labels: str) -> None:
    from demo.tasks import showcase_advance

    transaction.on_commit(lambda: showcase_advance.delay(project_id, user_id, labels))
