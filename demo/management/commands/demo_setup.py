"""Create the demo user and projects for `make run`; safe to run again.

The demo project also shows rollouts end to end: the demo policy is trained on CPU on
the first run (``train_demo_policy``; its weights are kept under the data directory and
reused), then two rollout jobs on a few of the demo's tasks are queued for the worker
that `make run` starts next: Monte Carlo labels for every step, and a first-error search
on the failures, both compared with the generated ground truth when they finish.
"""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand

from trajectories import synthetic
from trajectories.models import Membership, Project
from trajectories.services import ImportRejected, membership_set, project_create, trajectory_import

# Rollout jobs on the demo project: continuations per step, and how many of its tasks
# (each with four rollouts) they cover; about a minute of CPU each on the worker.
DEMO_K = 8
DEMO_ROLLOUT_TASKS = 6
DEMO_SEED = 7
DEMO_USER = "demo"
DEMO_PASSWORD = "demo"
REALDATA = settings.BASE_DIR.parent / "shared" / "realdata"
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
            "--rollout-tasks", type=int, default=DEMO_ROLLOUT_TASKS,
            help="demo tasks to queue rollout jobs for (0: no policy, no rollouts)",
        )  # fmt: skip

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

        jobs: list[int] = []
        demo = Project.objects.filter(slug="demo").first()
        if demo is not None and options["rollout_tasks"] > 0:
            jobs = self._rollouts(demo, user, tasks=options["rollout_tasks"])

        self.stdout.write("Stepscope is at http://127.0.0.1:8000/")
        self.stdout.write(f"Log in as {DEMO_USER} / {DEMO_PASSWORD}")
        self.stdout.write(json.dumps({"user": DEMO_USER, "created": imports, "rollout_jobs": jobs}))

    def _rollouts(self, project: Project, user: Any, *, tasks: int) -> list[int]:
        """Train (once) and register the demo policy, then queue the demo's rollout jobs
        unless they were queued before. Returns the ids of the jobs queued now."""
        from rollouts.management.commands.train_demo_policy import POLICY_NAME, demo_policy_dir
        from rollouts.models import Policy, RolloutJob
        from rollouts.services import rollout_job_start

        if not (demo_policy_dir() / "stepscope-demo-policy.json").is_file():
            self.stdout.write("Training the demo policy on CPU (first run only, a few minutes)")
        call_command("train_demo_policy", stdout=StringIO())
        policy = Policy.objects.get(name=POLICY_NAME, project=None)
        if RolloutJob.objects.filter(project=project, policy=policy).exists():
            return []
        trajectory_ids = list(
            project.trajectories.filter(
                task_key__in=[f"arith-{DEMO_SEED}-{n}" for n in range(tasks)],
                continuation__isnull=True,
            ).values_list("pk", flat=True)
        )
        truth = synthetic.TRUTH_ANNOTATOR
        jobs = [
            rollout_job_start(
                project=project, policy=policy, k=DEMO_K, mode=mode, user=user,
                trajectory_ids=trajectory_ids, against=truth,
            )
            for mode in (RolloutJob.Mode.ALL, RolloutJob.Mode.SEARCH)
        ]  # fmt: skip
        self.stdout.write(
            f"Queued rollout jobs {', '.join(str(job.pk) for job in jobs)} on the demo project"
            f" ({len(trajectory_ids)} trajectories, k={DEMO_K}); the worker runs them"
        )
        return [job.pk for job in jobs]
