"""python manage.py import_trajectories --project SLUG [--create] [--owner USERNAME]
--format FORMAT [--mapping FILE] [--skip-invalid] PATH...
python manage.py import_trajectories --project SLUG [--create] [--owner USERNAME]
--format FORMAT --follow DIR [--once] [--interval SECONDS]

PATH is a file or a directory; a directory stands for what the format reads in it (by
default every .json, .jsonl, .traj and .eval file below it, in sorted order; an OpenHands
conversation folder once, a ChatDev folder's .log files). Each is its own all-or-nothing
import.

A project is seen only by its members: ``--owner`` names the user who becomes its admin
(on a project that exists, they join it as one or are made one). When no active member
can open the project, the summary's ``warning`` says so.

``--follow DIR`` keeps importing what a trainer writes into DIR: every few seconds
(``--interval``) each file that is new or grew is imported, a JSON Lines file's new
lines only (``trajectories.services.follow``). What it imported is remembered in the
database, so it can be stopped and started again without importing anything twice.
``--once`` makes one pass and stops."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from trajectories.formats import import_units
from trajectories.models import Project
from trajectories.services import (
    FollowPass,
    ImportRejected,
    follow_pass_run,
    follow_source_set,
    parser_get,
    project_create,
    project_owner_set,
    trajectory_import,
)


class Command(BaseCommand):
    help = "Import trajectory files into a project; prints a one-line JSON summary last."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="*", type=Path, metavar="PATH")
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--create", action="store_true", help="create the project if missing")
        parser.add_argument(
            "--owner",
            metavar="USERNAME",
            help="an existing user who becomes the project's admin (nobody else can open a"
            " project this command creates)",
        )
        parser.add_argument("--format", required=True, dest="source_format")
        parser.add_argument("--mapping", type=Path, help="JSON mapping for --format mapped")
        parser.add_argument(
            "--skip-invalid",
            action="store_true",
            help="write the good records and report the bad ones (default: all or nothing)",
        )
        parser.add_argument(
            "--follow",
            type=Path,
            metavar="DIR",
            help="keep importing the new and grown files of DIR (stop with Ctrl-C)",
        )
        parser.add_argument("--once", action="store_true", help="with --follow: one pass")
        parser.add_argument(
            "--interval", type=float, default=5.0, help="with --follow: seconds between passes"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        source_format: str = options["source_format"]
        mapping = None
        if options["mapping"] is not None:
            try:
                mapping = json.loads(options["mapping"].read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
                message = f"{options['mapping']}: not a readable JSON mapping: {error}"
                raise CommandError(message) from None
        try:
            parser_get(source_format, mapping)
        except ValueError as error:
            raise CommandError(str(error)) from None
        if options["follow"] is not None and options["paths"]:
            raise CommandError("give PATH... or --follow DIR, not both")
        if options["follow"] is None and not options["paths"]:
            raise CommandError("give the files to import (PATH...) or --follow DIR")
        if options["follow"] is None and options["once"]:
            raise CommandError("--once goes with --follow DIR")
        if options["follow"] is not None and not options["follow"].is_dir():
            raise CommandError(f"{options['follow']}: not a folder")
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None and not options["create"]:
            raise CommandError(f"no project {options['project']!r}; pass --create to make it")
        owner = _owner(options["owner"])
        paths = _expand(options["paths"], source_format)
        if project is None:
            project = project_create(slug=options["project"], name=options["project"], owner=owner)
        elif owner is not None:
            project_owner_set(project=project, user=owner)
        if options["follow"] is not None:
            self._follow(project, source_format, options)
            return

        summary: dict[str, Any] = {
            "created": 0,
            "unchanged": 0,
            "rejected": 0,
            "steps": 0,
            "batch": None,
        }
        batches = []
        failed = False
        for path in paths:
            try:
                batch = trajectory_import(
                    project=project,
                    source_format=source_format,
                    path=path,
                    skip_invalid=options["skip_invalid"],
                    mapping=mapping,
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
        if owner is not None:
            summary["owner"] = owner.get_username()
        if not project.memberships.filter(user__is_active=True).exists():
            summary["warning"] = (
                f"nobody can open project {project.slug!r}: it has no active member. Run the"
                " command again with --owner USERNAME (an existing user, who becomes its"
                " admin) to see it in the browser and the API."
            )
            self.stderr.write(summary["warning"])
        self.stdout.write(json.dumps(summary))
        if failed:
            raise SystemExit(1)

    def _follow(self, project: Project, source_format: str, options: dict[str, Any]) -> None:
        if options["mapping"] is not None:
            raise CommandError("--follow does not take a mapping")
        source = follow_source_set(
            project=project,
            path=options["follow"],
            source_format=source_format,
            skip_invalid=options["skip_invalid"],
        )
        while True:
            done = follow_pass_run(source=source)
            for path in done.failed:
                row = source.files.get(path=path)
                self.stderr.write(f"{path}: nothing imported from this part: {row.error}")
            if options["once"] or done.imported or done.failed:
                self.stdout.write(json.dumps(_pass_summary(done)))
            if options["once"]:
                if done.failed:
                    raise SystemExit(1)
                return
            try:
                time.sleep(options["interval"])
            except KeyboardInterrupt:
                return


def _pass_summary(done: FollowPass) -> dict[str, Any]:
    return {
        "files": done.files,
        "imported": done.imported,
        "failed": done.failed,
        "created": done.created,
        "unchanged": done.unchanged,
        "rejected": done.rejected,
        "steps": done.steps,
    }


def _owner(username: str | None) -> User | None:
    if username is None:
        return None
    user = User.objects.filter(username=username, is_active=True).first()
    if user is None:
        raise CommandError(
            f"--owner: no active user {username!r}; create one first (manage.py"
            " createsuperuser, or sign-up where it is open)"
        )
    return user


def _expand(paths: list[Path], source_format: str) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = import_units(source_format, path)
            if not found:
                raise CommandError(f"{path}: nothing in it that --format {source_format} reads")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise CommandError(f"{path}: no such file or directory")
    return files
