"""python manage.py import_trajectories --project SLUG [--create] --format FORMAT PATH..."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from trajectories.formats import parser_for
from trajectories.models import Project
from trajectories.services import ImportRejected, project_create, trajectory_import


class Command(BaseCommand):
    help = "Import trajectory files into a project; prints a one-line JSON summary last."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", type=Path, metavar="PATH")
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--create", action="store_true", help="create the project if missing")
        parser.add_argument("--format", required=True, dest="source_format")
        parser.add_argument(
            "--skip-invalid",
            action="store_true",
            help="write the good records and report the bad ones (default: all or nothing)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        source_format: str = options["source_format"]
        try:
            parser_for(source_format)
        except ValueError as error:
            raise CommandError(str(error)) from None
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            if not options["create"]:
                raise CommandError(f"no project {options['project']!r}; pass --create to make it")
            project = project_create(slug=options["project"], name=options["project"])

        summary: dict[str, Any] = {
            "created": 0,
            "unchanged": 0,
            "rejected": 0,
            "steps": 0,
            "batch": None,
        }
        batches = []
        failed = False
        for path in options["paths"]:
            if not path.is_file():
                raise CommandError(f"{path}: no such file")
            try:
                batch = trajectory_import(
                    project=project,
                    source_format=source_format,
                    path=path,
                    skip_invalid=options["skip_invalid"],
                )
            except ImportRejected as rejected:
                batch = rejected.batch
                failed = True
                for problem in batch.errors:
                    where = problem["location"] + (
                        f", field {problem['field']!r}" if problem["field"] else ""
                    )
                    self.stderr.write(f"{path}: {where}: {problem['message']}")
                if batch.rejected_count > len(batch.errors):
                    self.stderr.write(f"... and {batch.rejected_count - len(batch.errors)} more")
                self.stderr.write(f"{path}: nothing imported from this file")
            summary["created"] += batch.created_count
            summary["unchanged"] += batch.unchanged_count
            summary["rejected"] += batch.rejected_count
            summary["steps"] += batch.step_count
            batches.append(batch.pk)
        summary["batch"] = batches[0] if len(batches) == 1 else batches
        self.stdout.write(json.dumps(summary))
        if failed:
            raise SystemExit(1)
