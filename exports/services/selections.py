"""Saved selections: named filters over a project's trajectories that exports (the page,
the API and ``--selection NAME``) use, each export freezing the definition into its
manifest."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction
from django.utils.text import slugify

from exports.models import Selection
from scoring.selectors import scorer_id_for
from trajectories.models import Project
from trajectories.selectors import (
    TrajectoryFilters,
    trajectory_filters_definition,
    trajectory_filters_from,
)


def selection_save(
    *, project: Project, name: str, filters: TrajectoryFilters, user: User | None
) -> Selection:
    """Store ``filters`` under ``name``; ValueError says what is wrong. A name is never
    reused for other filters: exports name their selection, so delete it first."""
    if not name or slugify(name) != name:
        raise ValueError(f"selection name {name!r} must be a slug (letters, digits, - and _)")
    definition = trajectory_filters_definition(filters)
    trajectory_filters_from(definition)
    if filters.human_model:
        scorer_id_for(project, filters.model_scorer)
    if filters.credit_run is not None:
        from scoring.models import AttributionRun

        if not AttributionRun.objects.filter(project=project, pk=filters.credit_run).exists():
            raise ValueError(f"no attribution run {filters.credit_run} in project {project.slug!r}")
    with transaction.atomic():
        if Selection.objects.filter(project=project, name=name).exists():
            raise ValueError(f"a selection named {name!r} exists; delete it or choose a new name")
        return Selection.objects.create(
            project=project, name=name, definition=definition, created_by=user
        )


def selection_delete(*, selection: Selection) -> None:
    selection.delete()
