"""The trajectory list: its sorts and one page of rows with their columns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import (
    Case,
    F,
    FloatField,
    QuerySet,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce, Left, Length

from trajectories.columns import ListColumn, list_columns_all
from trajectories.models import (
    Project,
    Trajectory,
)
from trajectories.search import search_probe_pays
from trajectories.selection import TrajectoryFilters
from trajectories.selectors.filtering import SELECTION_RANK, trajectories_filtered

TRAJECTORY_PAGE_SIZE = 50
# Trajectory list rows show the start of the task only; the full text is never loaded there.
TASK_PREVIEW_CHARS = 160

# The list's own columns, each with what it sorts by; registered columns sort by their
# ``ListColumn.sort`` annotation. ``?ordering=steps`` sorts ascending, ``-steps`` descending.
LIST_SORTS: dict[str, str] = {
    "external_id": "external_id",
    "task": "task_key",
    "model": "model_name",
    "steps": "step_count",
    "outcome": "success",
    "reward": "outcome_reward",
    "id": "id",
}
# Newest first: the order of a list with no ``ordering``.
DEFAULT_ORDERING = "-id"


@dataclass(frozen=True)
class ListOrdering:
    name: str  # a key of LIST_SORTS or a column's name
    descending: bool
    field: str  # what the query orders by (a field or a column's annotation)

    @property
    def text(self) -> str:
        return f"-{self.name}" if self.descending else self.name


def list_ordering_parse(text: str, columns: Sequence[ListColumn]) -> ListOrdering:
    """``name`` or ``-name`` of a sortable column among ``columns`` (the ones the member
    sees) or the list's own; ValueError names the sorts there are."""
    text = (text or DEFAULT_ORDERING).strip()
    name = text.removeprefix("-")
    sorts = {**LIST_SORTS, **{c.name: c.sort for c in columns if c.sort}}
    if name not in sorts:
        raise ValueError(f"cannot sort by {name!r}; sort by {', '.join(sorts)} (- for descending)")
    return ListOrdering(name=name, descending=text.startswith("-"), field=sorts[name])


# The trajectory's own columns that are never empty: sorted plainly, so the pkey and the
# (project, ...) indexes serve the order (``NULLS LAST`` on ``id`` made every first page
# of the list sort the whole project: 0.2 s at 58,000 trajectories).
_NEVER_EMPTY = frozenset(f.name for f in Trajectory._meta.concrete_fields if not f.null)


def _ordered(queryset: QuerySet[Trajectory], ordering: ListOrdering) -> QuerySet[Trajectory]:
    """Sorted, empty values last either way, ties by id in the same direction."""
    if ordering.field in _NEVER_EMPTY:
        sign = "-" if ordering.descending else ""
        return queryset.order_by(*dict.fromkeys((f"{sign}{ordering.field}", f"{sign}id")))
    if ordering.descending:
        return queryset.order_by(F(ordering.field).desc(nulls_last=True), "-id")
    return queryset.order_by(F(ordering.field).asc(nulls_last=True), "id")


# The list's sorts on text; every other sort is on a number (or success as 1 and 0).
_TEXT_SORTS = frozenset({"external_id", "task_key", "model_name"})


def list_sort_key(ordering: ListOrdering) -> Any:
    """What a cursor pages by: the sorted value with no NULLs (an empty value is +inf
    ascending and -inf descending, so it comes last either way, as on the page).
    A column's sort needs its annotations on the query."""
    if ordering.field in _TEXT_SORTS:
        return F(ordering.field)
    if ordering.field == "success":
        value: Any = Case(
            When(success=True, then=Value(1.0)),
            When(success=False, then=Value(0.0)),
            output_field=FloatField(),
        )
    else:
        value = Cast(F(ordering.field), FloatField())
    empty = float("-inf") if ordering.descending else float("inf")
    return Coalesce(value, Value(empty, output_field=FloatField()))


def trajectory_list_page(
    project: Project,
    filters: TrajectoryFilters,
    *,
    after: int | None = None,
    offset: int = 0,
    ordering: ListOrdering | None = None,
    size: int = TRAJECTORY_PAGE_SIZE,
    columns: Sequence[ListColumn] | None = None,
) -> tuple[list[Trajectory], int | None]:
    """One page of the trajectory list and the cursor for the next page (``None`` on the
    last page). Newest first by default, with keyset pagination on id (``after``): the
    cost of a page does not grow with how deep it is. Sorted by another column, pages go
    by ``offset`` and the cursor is the next page's offset. Rows carry ``task_preview``
    and ``list_cells`` (a (column, text) pair per column); the task text itself, metadata
    and the raw source are not loaded. ``columns`` defaults to every registered column."""
    if columns is None:
        columns = list_columns_all()
    if ordering is None:
        ordering = list_ordering_parse(DEFAULT_ORDERING, columns)
    # A ranked selection (semantic search) keeps its own order under the default one.
    ranked = filters.ranked and ordering.text == DEFAULT_ORDERING
    by_id = ordering.text == DEFAULT_ORDERING and not filters.ranked
    probe = by_id and bool(filters.q.strip()) and search_probe_pays(filters.q, size)
    queryset = trajectories_filtered(project, filters, search_probe=probe)
    page_ids: list[int] = []
    if ranked:
        # The page's rows by rank first, then their columns for those rows alone: sorted
        # with its columns, every candidate's columns were computed (0.4 s for 1,000).
        ranked_ids = queryset.order_by(SELECTION_RANK, "id").values_list("id", flat=True)
        page_ids = list(ranked_ids[offset : offset + size + 1])
        queryset = Trajectory.objects.filter(project=project, pk__in=page_ids)
    if by_id and after is not None:
        queryset = queryset.filter(id__lt=after)
    annotations: dict[str, Any] = {}
    for column in columns:
        annotations.update(column.annotations(project))
    queryset = queryset.only(
        "id",
        "external_id",
        "task_key",
        "model_name",
        "step_count",
        "success",
        "outcome_reward",
        "parent_id",
        "branch_index",
    ).annotate(
        task_preview=Left("task", TASK_PREVIEW_CHARS), task_length=Length("task"), **annotations
    )
    start = 0 if by_id else offset
    rows: list[Trajectory]
    if ranked:
        position = {pk: index for index, pk in enumerate(page_ids)}
        rows = sorted(queryset, key=lambda row: position[row.pk])
    else:
        rows = list(_ordered(queryset, ordering)[start : start + size + 1])
    for row in rows:
        row.list_cells = [(column, column.cell(row)) for column in columns]  # type: ignore[attr-defined]
    if len(rows) <= size:
        return rows, None
    return rows[:size], (rows[size - 1].pk if by_id else start + size)
