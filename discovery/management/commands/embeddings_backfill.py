"""Embed what has no vector yet for the configured encoder: every project, or one.
Resumable: a pass stopped half-way starts where the stored vectors end."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from discovery import store
from discovery.services import embeddings_build, encoder_configured
from trajectories.models import Project


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--project", help="a project's slug (default: every project)")

    def handle(self, *args: Any, **options: Any) -> None:
        # Creates the tables where pgvector was installed after the migration ran.
        if not store.vector_tables_ensure():
            raise CommandError(store.PGVECTOR_MISSING)
        projects = Project.objects.order_by("pk")
        if options["project"]:
            projects = projects.filter(slug=options["project"])
            if not projects.exists():
                raise CommandError(f"no project {options['project']!r}")
        info = encoder_configured()
        for project in projects:
            result = embeddings_build(project_id=project.pk)
            self.stdout.write(
                f"{project.slug}: {result.steps} steps and {result.tasks} tasks embedded"
                f" with {info.name}@{info.revision}"
            )
