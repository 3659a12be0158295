"""python manage.py train_scorer --project SLUG --name NAME [--wait]"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scoring import prm
from scoring.management.waiting import project_or_error, run_summary, wait_for
from scoring.models import ScoringRun
from scoring.services import NEUTRAL_CHOICES, ScoringError, scorer_train_start


class Command(BaseCommand):
    help = (
        "Train the embedded scorer's head on the project's step labels as a Celery task,"
        " stored as a new revision; prints a one-line JSON summary last."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--name", required=True, help="scorer name for the head")
        parser.add_argument("--neutral", choices=NEUTRAL_CHOICES, default="skip")
        parser.add_argument("--holdout", type=float, default=0.2, help="held-out task share")
        parser.add_argument(
            "--encoder", default=prm.DEFAULT_ENCODER, help="encoder directory or hub id"
        )
        parser.add_argument(
            "--params", default="{}", help="scorer parameters as JSON (max_length, ...)"
        )
        parser.add_argument("--queue", default="gpu")
        parser.add_argument(
            "--score", action="store_true", help="then score the project with the new head"
        )
        parser.add_argument("--wait", action="store_true", help="wait until training ends")
        parser.add_argument("--timeout", type=float, default=3600, help="seconds to --wait")

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
        try:
            parameters = json.loads(options["params"])
        except json.JSONDecodeError as error:
            raise CommandError(f"--params is not JSON: {error}") from None
        if not isinstance(parameters, dict):
            raise CommandError("--params must be a JSON object")
        try:
            run = scorer_train_start(
                project=project,
                name=options["name"],
                encoder=options["encoder"],
                parameters=parameters,
                neutral=options["neutral"],
                holdout=options["holdout"],
                queue=options["queue"],
                score_after=options["score"],
            )
        except ScoringError as error:
            raise CommandError(str(error)) from None
        if options["wait"]:
            run = wait_for(run, timeout=options["timeout"])
        summary = run_summary(run)
        for name in ("auroc", "f1", "processbench_f1", "train_steps", "heldout_steps"):
            value = run.metrics.get(name)
            summary[name] = round(value, 4) if isinstance(value, float) else value
        self.stdout.write(json.dumps(summary))
        if run.status == ScoringRun.Status.FAILED:
            raise SystemExit(1)
