"""python manage.py attribute --project SLUG --method METHOD [--scorer NAME] [--labels SOURCE]
[--gamma G] [--lam L] [--param KEY=VALUE ...] [--wait]"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scoring import methods
from scoring.management.waiting import project_or_error, wait_for
from scoring.models import AttributionRun
from scoring.selectors import scorer_latest
from scoring.services import AttributionError, attribution_run_start
from trajectories.models import Step
from trajectories.selection import COMMAND_HELP, SelectionError, selection_from_pairs


def attribution_summary(run: AttributionRun) -> dict[str, Any]:
    metrics = {k: v for k, v in run.metrics.items() if k != "tokens"}
    return {
        "run": run.pk,
        "method": run.method,
        "status": run.status,
        "scorer": run.scorer.name if run.scorer else None,
        "scorer_revision": run.scorer_revision or None,
        "labels": run.label_source or None,
        "parameters": run.parameters,
        "total": run.total,
        "done": run.done,
        "steps_per_second": (
            round(run.steps_per_second, 2) if run.steps_per_second is not None else None
        ),
        "metrics": metrics,
        "error": run.error or None,
    }


def parse_params(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CommandError(f"--param takes KEY=VALUE, got {pair!r}")
        out[name.strip()] = value.strip()
    return out


class Command(BaseCommand):
    help = (
        "Credit each step of a project's trajectories by a method (CPU methods on the"
        " default queue, model methods on the scorer's queue); prints a one-line JSON summary"
        " last. Methods: " + ", ".join(methods.METHODS) + "."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--method", required=True, choices=list(methods.METHODS))
        parser.add_argument("--scorer", help="scorer name (newest revision)")
        parser.add_argument(
            "--labels", default="", help="label source whose values are the step rewards"
        )
        parser.add_argument("--gamma", type=float, help="discount (returns, gae)")
        parser.add_argument("--lam", type=float, help="GAE lambda")
        parser.add_argument(
            "--param",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="any other parameter of the method (repeatable)",
        )
        parser.add_argument(
            "--trajectory",
            type=int,
            action="append",
            dest="trajectories",
            metavar="ID",
            help="only this trajectory (repeatable)",
        )
        parser.add_argument("--step", type=int, help="the step, for token-saliency")
        parser.add_argument(
            "--filter", action="append", default=[], metavar="NAME=VALUE", help=COMMAND_HELP
        )
        parser.add_argument("--wait", action="store_true", help="wait until the run ends")
        parser.add_argument("--timeout", type=float, default=3600, help="seconds to --wait")

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
        scorer = None
        if options["scorer"]:
            scorer = scorer_latest(project, options["scorer"])
            if scorer is None:
                raise CommandError(f"no scorer {options['scorer']!r} for project {project.slug!r}")
        parameters: dict[str, Any] = parse_params(options["param"])
        for name in ("gamma", "lam"):
            if options[name] is not None:
                parameters[name] = options[name]
        step = None
        if options["step"] is not None:
            step = (
                Step.objects.select_related("trajectory")
                .filter(pk=options["step"], trajectory__project=project)
                .first()
            )
            if step is None:
                raise CommandError(f"no step {options['step']} in project {project.slug!r}")
        try:
            filters = selection_from_pairs(options["filter"])
            run = attribution_run_start(
                project=project,
                method=options["method"],
                scorer=scorer,
                label_source=options["labels"],
                parameters=parameters,
                trajectory_ids=options["trajectories"],
                filters=filters,
                step=step,
            )
        except (AttributionError, SelectionError) as error:
            raise CommandError(str(error)) from None
        if options["wait"]:
            run = wait_for(run, timeout=options["timeout"])
        self.stdout.write(json.dumps(attribution_summary(run)))
        if run.status == AttributionRun.Status.FAILED:
            raise SystemExit(1)
