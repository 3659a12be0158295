"""Saved selections: named filters over a project's trajectories that exports (the page,
the API and ``--selection NAME``) use, each export freezing the definition into its
manifest."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction
from django.utils.text import slugify

from exports.models import Selection
from trajectories.models import Project
from trajectories.selection import TrajectoryFilters, selection_definition, selection_parse
from trajectories.selectors import selection_check


def selection_save(
    *, project: Project, name: str, filters: TrajectoryFilters, user: User | None
) -> Selection:
    """Store ``filters`` under ``name``; ValueError says what is wrong. A name is never
    reused for other filters: exports name their selection, so delete it first."""
    if not name or slugify(name) != name:
        raise ValueError(f"selection name {name!r} must be a slug (letters, digits, - and _)")
    definition = selection_definition(filters)
    selection_parse(definition)  # the checks across filters (human_model needs a scorer)
    selection_check(project, filters)  # the scorer and attribution run it names exist
    with transaction.atomic():
        if Selection.objects.filter(project=project, name=name).exists():
            raise ValueError(f"a selection named {name!r} exists; delete it or choose a new name")
        return Selection.objects.create(
            project=project, name=name, definition=definition, created_by=user
        )


def selection_delete(*, selection: Selection) -> None:
    selection.delete()
