"""python manage.py import_scores --project SLUG --scorer NAME FILE"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scoring.management.waiting import project_or_error
from scoring.services import ScoresRejected, scores_import

SHOWN_PROBLEMS = 20


class Command(BaseCommand):
    help = (
        "Store step scores computed elsewhere (JSONL of {trajectory: external_id, step:"
        " index, value: p}) as a scorer's output; prints a one-line JSON summary last."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path, metavar="FILE")
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument(
            "--scorer", required=True, help="scorer name; created (kind external) if missing"
        )
        parser.add_argument(
            "--skip-invalid",
            action="store_true",
            help="store the good lines and report the bad ones (default: all or nothing)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
        path: Path = options["path"]
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        try:
            run, problems = scores_import(
                project=project,
                scorer_name=options["scorer"],
                path=path,
                skip_invalid=options["skip_invalid"],
            )
        except ScoresRejected as rejected:
            self._report(path, rejected.problems)
            self.stderr.write(f"{path}: nothing imported")
            self.stdout.write(
                json.dumps({"stored": 0, "rejected": len(rejected.problems), "run": None})
            )
            raise SystemExit(1) from None
        self._report(path, problems)
        summary = {
            "stored": run.done,
            "rejected": len(problems),
            "run": run.pk,
            "scorer": run.scorer.name if run.scorer else None,
            "scorer_id": run.scorer_id,
        }
        self.stdout.write(json.dumps(summary))

    def _report(self, path: Path, problems: list[Any]) -> None:
        for problem in problems[:SHOWN_PROBLEMS]:
            self.stderr.write(f"{path}: line {problem.line}: {problem.message}")
        if len(problems) > SHOWN_PROBLEMS:
            self.stderr.write(f"... and {len(problems) - SHOWN_PROBLEMS} more")
