"""python manage.py score --project SLUG --scorer NAME [--queue NAME] [--only-unscored]
[--prompt-version N] [--wait]"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from labeling.models import Queue
from scoring.management.waiting import project_or_error, run_summary, wait_for
from scoring.models import ScoringRun
from scoring.selectors import scorer_latest
from scoring.services import ScoringError, scoring_run_start
from trajectories.selection import COMMAND_HELP, SelectionError, selection_from_pairs


class Command(BaseCommand):
    help = (
        "Score a project's labelable steps with a scorer on its Celery queue; prints a"
        " one-line JSON summary last."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--scorer", required=True, help="scorer name (newest revision)")
        parser.add_argument("--only-unscored", action="store_true", help="skip scored steps")
        parser.add_argument(
            "--trajectory",
            type=int,
            action="append",
            dest="trajectories",
            metavar="ID",
            help="score only this trajectory (repeatable)",
        )
        parser.add_argument(
            "--queue", metavar="NAME", help="score only the trajectories of this labeling queue"
        )
        parser.add_argument(
            "--prompt-version",
            type=int,
            metavar="N",
            help="an llm-judge's prompt version to ask with (default: its newest)",
        )
        parser.add_argument(
            "--rubric",
            metavar="NAME",
            help="a rubric-mode llm-judge: the rubric it fills (default: the project's one)",
        )
        parser.add_argument(
            "--filter", action="append", default=[], metavar="NAME=VALUE", help=COMMAND_HELP
        )
        parser.add_argument("--wait", action="store_true", help="wait until the run ends")
        parser.add_argument("--timeout", type=float, default=3600, help="seconds to --wait")

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
        scorer = scorer_latest(project, options["scorer"])
        if scorer is None:
            raise CommandError(f"no scorer {options['scorer']!r} for project {project.slug!r}")
        queue = None
        if options["queue"]:
            queue = Queue.objects.filter(project=project, name=options["queue"]).first()
            if queue is None:
                raise CommandError(f"no queue {options['queue']!r} in project {project.slug!r}")
        try:
            filters = selection_from_pairs(options["filter"])
            run = scoring_run_start(
                project=project,
                scorer=scorer,
                only_unscored=options["only_unscored"],
                trajectory_ids=options["trajectories"],
                filters=filters,
                queue=queue,
                prompt_version=options["prompt_version"],
                rubric=options["rubric"],
            )
        except (ScoringError, SelectionError) as error:
            raise CommandError(str(error)) from None
        if options["wait"]:
            run = wait_for(run, timeout=options["timeout"])
        self.stdout.write(json.dumps(run_summary(run)))
        if run.status == ScoringRun.Status.FAILED:
            raise SystemExit(1)
