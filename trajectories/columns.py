"""The trajectory list's columns: a registry other apps fill (label progress and first
error from ``labeling/columns.py``, the latest score from ``scoring/columns.py``, from
their ``AppConfig.ready()``: trajectories may not read their tables), and the cost column,
which is trajectories' own."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import FloatField, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce

from trajectories.metadata_sql import json_number, metadata_key
from trajectories.models import Project, Step, Trajectory


def _always_shown(project: Project, role: str | None) -> bool:
    return True


@dataclass(frozen=True)
class ListColumn:
    """A column of the trajectory list. ``annotations`` gives the expressions the list's
    one query adds for it (subqueries on the row, so a page costs no more queries with
    more columns), ``cell`` the text shown from a row carrying them, ``shown`` whether a
    member with this role sees it in this project (blind labeling hides others' labels
    from annotators, and a project may hide model scores from them)."""

    name: str
    header: str
    annotations: Callable[[Project], Mapping[str, Any]]
    cell: Callable[[Trajectory], str]
    numeric: bool = False
    help: str = ""
    shown: Callable[[Project, str | None], bool] = _always_shown
    # The annotation the list sorts by when this column's header is clicked; empty: the
    # column does not sort.
    sort: str = ""


# Columns on labels and scores come from the apps that own those tables, as the filters
# do; the list shows them in the order registered (trajectories' own first).
_LIST_COLUMNS: dict[str, ListColumn] = {}


def trajectory_column_register(column: ListColumn) -> ListColumn:
    """Add ``column`` to the trajectory list; registering a name again replaces it."""
    _LIST_COLUMNS[column.name] = column
    return column


def list_columns_all() -> list[ListColumn]:
    return list(_LIST_COLUMNS.values())


def trajectory_list_columns(project: Project, role: str | None) -> list[ListColumn]:
    """The columns a member with ``role`` sees in ``project``'s list."""
    return [column for column in _LIST_COLUMNS.values() if column.shown(project, role)]


def _cost_annotations(project: Project) -> dict[str, Any]:
    """The trajectory's ``metadata.cost`` (the trace importers' total), else the sum of
    its steps' ``metadata.cost`` where they have one."""
    step_costs = (
        Step.objects.filter(trajectory=OuterRef("pk"), metadata__has_key="cost")
        .order_by()
        .values("trajectory")
        .annotate(total=Sum(json_number(metadata_key("cost"))))
        .values("total")
    )
    own = json_number(metadata_key("cost"))
    return {"list_cost": Coalesce(own, Subquery(step_costs, output_field=FloatField()))}


def _cost_cell(row: Trajectory) -> str:
    cost = getattr(row, "list_cost", None)
    return "—" if cost is None else f"{cost:.4g}"


trajectory_column_register(
    ListColumn(
        name="cost",
        header="Cost",
        annotations=_cost_annotations,
        cell=_cost_cell,
        numeric=True,
        help="metadata.cost, or the sum of the steps' metadata.cost",
        sort="list_cost",
    )
)
