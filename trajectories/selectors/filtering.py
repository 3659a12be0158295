"""Applying a selection (``trajectories/selection.py``'s language) to a project's
trajectories: the column filters, outcome, search, step and metadata conditions, and the
conditions other apps register on their own tables."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import (
    Exists,
    OuterRef,
    Q,
    QuerySet,
)

from trajectories.metadata_query import metadata_conditions_parse
from trajectories.metadata_sql import metadata_condition_q
from trajectories.models import (
    ImportBatch,
    Project,
    Step,
    Trajectory,
)
from trajectories.search import search_condition
from trajectories.selection import FILTERS, SelectionError, TrajectoryFilters

_OUTCOME_FILTERS = {
    "success": Q(success=True),
    "failure": Q(success=False),
    "unknown": Q(success__isnull=True),
}


# The filters on labels and credits are conditions the apps that own those tables add
# (labeling and scoring, from their AppConfig.ready()), so this app names none of them.
# A condition gets the project and the filters, and gives what to narrow the trajectories
# by, or None when its fields filter nothing.
FilterCondition = Callable[[Project, TrajectoryFilters], Q | None]
_FILTER_CONDITIONS: dict[str, FilterCondition] = {}


def trajectory_filter_register(name: str) -> Callable[[FilterCondition], FilterCondition]:
    """Decorate a condition to have ``trajectories_filtered`` apply it, after the
    trajectory's own fields, in the order the apps register (the order of
    INSTALLED_APPS). Registering a name again replaces its condition."""

    def register(condition: FilterCondition) -> FilterCondition:
        _FILTER_CONDITIONS[name] = condition
        return condition

    return register


# A narrowing sees the selection built so far and may run a query on it: semantic search
# takes the steps nearest to a text among the filtered trajectories' steps (an index walk
# that must know the other filters). It may annotate ``SELECTION_RANK`` (smaller first),
# which the list follows under its default order. Filled by the higher apps, as above.
# Its last argument, ``checking``, is set by ``selection_check``: check the fields and
# read nothing else (the walk itself is left to the query that lists).
SELECTION_RANK = "selection_rank"
SelectionNarrowing = Callable[
    [Project, TrajectoryFilters, QuerySet[Trajectory], bool], QuerySet[Trajectory] | None
]
_NARROWINGS: dict[str, SelectionNarrowing] = {}


def trajectory_narrowing_register(
    name: str,
) -> Callable[[SelectionNarrowing], SelectionNarrowing]:
    """Decorate a narrowing for ``trajectories_filtered`` to apply after every condition.
    It returns the narrowed queryset, or None when its fields filter nothing."""

    def register(narrowing: SelectionNarrowing) -> SelectionNarrowing:
        _NARROWINGS[name] = narrowing
        return narrowing

    return register


def trajectories_filtered(
    project: Project,
    filters: TrajectoryFilters,
    *,
    search_probe: bool = False,
    checking: bool = False,
) -> QuerySet[Trajectory]:
    """The project's trajectories that pass ``filters``. ``search_probe``: test the
    search per trajectory (``trajectories.search.search_condition``), for a first page
    of a common word; a count or a whole selection keeps the default. ``checking``:
    only to raise SelectionError (``selection_check``); the queryset is not to be read."""
    queryset = Trajectory.objects.filter(project=project)
    if filters.outcome in _OUTCOME_FILTERS:
        queryset = queryset.filter(_OUTCOME_FILTERS[filters.outcome])
    if filters.origin:
        continued = Exists(
            ImportBatch.objects.filter(pk=OuterRef("import_batch_id"), internal=True)
        )
        queryset = queryset.filter(continued if filters.origin == "rollouts" else ~continued)
    for spec in FILTERS.values():
        value = getattr(filters, spec.name)
        if value in ("", None):
            continue
        if spec.column:
            queryset = queryset.filter(**_text_or_prefix(f"{spec.column}__{spec.lookup}", value))
        elif spec.step_column:
            steps = Step.objects.filter(
                trajectory=OuterRef("pk"), **{f"{spec.step_column}__{spec.lookup}": value}
            )
            queryset = queryset.filter(Exists(steps))
    for metadata_condition in metadata_conditions_parse(filters.meta):
        queryset = queryset.filter(metadata_condition_q(metadata_condition))
    step_condition = _step_condition(filters)
    if step_condition is not None:
        queryset = queryset.filter(
            Exists(Step.objects.filter(step_condition, trajectory=OuterRef("pk")))
        )
    if filters.error_steps == "no":
        errors = Step.objects.filter(trajectory=OuterRef("pk"), metadata__has_key="error")
        queryset = queryset.filter(~Exists(errors))
    if filters.q.strip():
        queryset = queryset.filter(search_condition(project, filters.q, probe=search_probe))
    for condition in _FILTER_CONDITIONS.values():
        narrowed = condition(project, filters)
        if narrowed is not None:
            queryset = queryset.filter(narrowed)
    for narrowing in _NARROWINGS.values():
        narrowed_set = narrowing(project, filters, queryset, checking)
        if narrowed_set is not None:
            queryset = narrowed_set
    if filters.ranked and SELECTION_RANK not in queryset.query.annotations:
        # No app fills the ranking (a deployment without the discovery app): refused,
        # never silently dropped.
        raise SelectionError({"similar": "semantic search is not installed"})
    return queryset


def selection_check(project: Project, filters: TrajectoryFilters) -> None:
    """Raise SelectionError, naming the filter, when ``filters`` names something
    ``project`` lacks (a scorer, an attribution run): what a job checks before it is
    queued. Building the query runs every condition; nothing is read (a semantic filter
    checks its vector and leaves its index walk to the query that lists)."""
    trajectories_filtered(project, filters, checking=True)


def _text_or_prefix(lookup: str, value: Any) -> dict[str, Any]:
    """An exact name, or with a trailing ``*`` (``model=gpt-4o*``) the names that start
    with the rest."""
    if lookup.endswith("__exact") and isinstance(value, str) and value.endswith("*"):
        return {lookup.removesuffix("__exact") + "__startswith": value[:-1]}
    return {lookup: value}


def _step_condition(filters: TrajectoryFilters) -> Q | None:
    """What one step must match, or None when no step filter is set."""
    fields: dict[str, Any] = {}
    if filters.tool:
        fields.update(_text_or_prefix("tool_name__exact", filters.tool))
    if filters.agent:
        fields.update(_text_or_prefix("agent__exact", filters.agent))
    if filters.kind:
        fields["kind"] = filters.kind
    if filters.error_steps == "yes":
        fields["metadata__has_key"] = "error"
    return Q(**fields) if fields else None
