"""The trajectory list's columns on labels, registered with trajectories' list by
``LabelingConfig.ready()``: they read labeling's tables, which trajectories may not.

- Labels: labelable steps with a submitted label (anyone's, as the label status filter
  counts them) out of the labelable steps.
- First error: the first step whose human majority (``StepMajority``) under the
  project's first schema is its error value (-1 for ternary and binary schemas).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Exists, IntegerField, Min, OuterRef, Subquery
from django.db.models.functions import Coalesce

from labeling.models import StepLabel, StepMajority
from labeling.selectors.surface import LabelingSettings, is_reviewer
from labeling.sources import label_schema_first
from trajectories.columns import ListColumn, trajectory_column_register
from trajectories.models import Project, Step, Trajectory


def _shown(project: Project, role: str | None) -> bool:
    """Blind labeling keeps every other annotator's labels from an annotator; a count or
    a first error is some of them, so annotators of a blind project see neither column."""
    return is_reviewer(role) or not LabelingSettings.of(project).blind_labeling


def _count(queryset: Any) -> Coalesce:
    counted = queryset.order_by().values("trajectory").annotate(n=Count("id")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


def _progress_annotations(project: Project) -> dict[str, Any]:
    labelable = Step.objects.filter(trajectory=OuterRef("pk"), labelable=True)
    submitted = StepLabel.objects.filter(step=OuterRef("pk"), status=StepLabel.Status.SUBMITTED)
    return {
        "list_labelable": _count(labelable),
        "list_labelled": _count(labelable.filter(Exists(submitted))),
    }


def _progress_cell(row: Trajectory) -> str:
    labelable = getattr(row, "list_labelable", 0)
    return "—" if not labelable else f"{getattr(row, 'list_labelled', 0)}/{labelable}"


def _first_error_annotations(project: Project) -> dict[str, Any]:
    schema = label_schema_first(project)
    error = schema.error_value if schema is not None else None
    majority_bad = StepMajority.objects.filter(
        step=OuterRef("pk"),
        schema_name=schema.name if schema is not None else "",
        value=error if error is not None else -1,
    )
    bad = Step.objects.filter(Exists(majority_bad), trajectory=OuterRef("pk"))
    first = bad.order_by().values("trajectory").annotate(first=Min("index")).values("first")
    return {"list_first_error": Subquery(first, output_field=IntegerField())}


def _first_error_cell(row: Trajectory) -> str:
    index = getattr(row, "list_first_error", None)
    return "—" if index is None else f"step {index}"


trajectory_column_register(
    ListColumn(
        name="label_progress",
        header="Labels",
        annotations=_progress_annotations,
        cell=_progress_cell,
        numeric=True,
        help="labelable steps with a submitted label / labelable steps",
        sort="list_labelled",
        shown=_shown,
    )
)
trajectory_column_register(
    ListColumn(
        name="first_error",
        header="First error",
        annotations=_first_error_annotations,
        cell=_first_error_cell,
        help="the first step the human majority labelled bad (in the first schema)",
        sort="list_first_error",
        shown=_shown,
    )
)
