"""Where the step labels that come with imported records go: trajectories' import writer
calls the writer below (registered from ``LabelingConfig.ready()``) once the steps are
written, inside the import's transaction."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.utils import timezone

from labeling.models import TERNARY_VALUES, LabelSchema, StepLabel
from trajectories.models import Project
from trajectories.services.imports import LabelRows, imported_labels_writer_register

COLUMNS = (
    "step_id, annotator_id, schema_id, value, tags, rationale, status, saw_model_scores,"
    " created_at, updated_at"
)


@imported_labels_writer_register
def imported_labels_writer(project: Project) -> LabelRows:
    """The labels' writer for one import into ``project``: submitted labels in its active
    schema (a ternary one is made for a project that has none)."""
    schema = project.label_schemas.filter(is_active=True).order_by("-version").first()
    if schema is None:
        schema = LabelSchema.objects.create(project=project, values=TERNARY_VALUES)
    now = timezone.now().isoformat()
    fixed: list[Any] = [schema.pk, StepLabel.Status.SUBMITTED.value, now, now]

    def insert(
        trajectories: list[int], indexes: list[int], annotators: list[int], values: list[int]
    ) -> None:
        """Steps get their ids from the column's default, so each label finds its step by
        trajectory and index (the unique index on the two). The labels' triggers keep
        each step's majority."""
        if not trajectories:
            return
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO labeling_steplabel ({COLUMNS})"
                " SELECT s.id, l.annotator_id, %s, l.value, '[]', '', %s, false, %s, %s"
                " FROM unnest(%s::bigint[], %s::int[], %s::int[], %s::int[])"
                " AS l(trajectory_id, index, annotator_id, value)"
                " JOIN trajectories_step s"
                " ON s.trajectory_id = l.trajectory_id AND s.index = l.index",
                [*fixed, trajectories, indexes, annotators, values],
            )
            assert cursor.rowcount == len(trajectories), "a label's step was not written"

    return insert
