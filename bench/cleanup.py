"""Removing a bench's project afterwards: the app's own batched deletion, run here and
now (Django's cascade would load every row; hand-written DELETEs fall behind the schema
as apps add tables that point at trajectories)."""

from __future__ import annotations

from trajectories.models import Project, ProjectDeletion
from trajectories.services import project_deletion_run


def project_drop(project: Project) -> None:
    deletion = ProjectDeletion.objects.create(project=project, slug=project.slug, name=project.name)
    project_deletion_run(deletion_id=deletion.pk)
    deletion.delete()
