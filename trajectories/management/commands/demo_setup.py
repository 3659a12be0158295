"""Create the demo user and projects for `make run`; safe to run again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from trajectories import synthetic
from trajectories.models import Membership, Project
from trajectories.services import ImportRejected, membership_set, project_create, trajectory_import

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

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(username=DEMO_USER)
        if created:
            user.set_password(DEMO_PASSWORD)
            user.save()

        imports: dict[str, int] = {}
        demo_file = Path(settings.DATA_DIR) / "demo-arithmetic.jsonl"
        synthetic.write_jsonl(demo_file, synthetic.rollouts(tasks=options["tasks"], seed=7))
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

        self.stdout.write("Stepscope is at http://127.0.0.1:8000/")
        self.stdout.write(f"Log in as {DEMO_USER} / {DEMO_PASSWORD}")
        self.stdout.write(json.dumps({"user": DEMO_USER, "created": imports}))
