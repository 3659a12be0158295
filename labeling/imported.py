"""Where the labels that come with imported records go: trajectories' import writer calls
the writers below (registered from ``LabelingConfig.ready()``) once the trajectories are
written, inside the import's transaction. Step labels become submitted ``StepLabel`` rows;
a record's first error becomes a submitted ``TrajectoryLabel`` (``found_error`` at that
step, or ``solution`` with no first error for -1), as an annotator's own verdict would be,
and a record's decisive failure (which agent, at which step) is set on that verdict."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.utils import timezone

from labeling.models import TERNARY_VALUES, LabelSchema, StepLabel, TrajectoryLabel
from trajectories.models import Project
from trajectories.services.import_writer import ImportedLabels, imported_labels_writer_register

COLUMNS = (
    "step_id, annotator_id, schema_id, value, tags, rationale, status, saw_model_scores,"
    " created_at, updated_at"
)


@imported_labels_writer_register
def imported_labels_writer(project: Project) -> ImportedLabels:
    """The labels' writer for one import into ``project``: submitted step labels in its
    active schema (a ternary one is made for a project that has none) and submitted
    verdicts."""
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

    def verdicts(trajectories: list[int], annotators: list[int], first_errors: list[int]) -> None:
        """The trajectories are new to the project, so no annotator has a verdict on them
        yet."""
        if not trajectories:
            return
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO labeling_trajectorylabel (trajectory_id, annotator_id,"
                " first_error_index, finish_reason, status, submitted_at, created_at, updated_at)"
                " SELECT v.trajectory_id, v.annotator_id, NULLIF(v.first_error, -1),"
                " CASE WHEN v.first_error >= 0 THEN %s ELSE %s END, %s, %s, %s, %s"
                " FROM unnest(%s::bigint[], %s::int[], %s::int[])"
                " AS v(trajectory_id, annotator_id, first_error)",
                [
                    TrajectoryLabel.FinishReason.FOUND_ERROR.value,
                    TrajectoryLabel.FinishReason.SOLUTION.value,
                    TrajectoryLabel.Status.SUBMITTED.value,
                    now,
                    now,
                    now,
                    trajectories,
                    annotators,
                    first_errors,
                ],
            )

    def decisive(
        trajectories: list[int],
        annotators: list[int],
        agents: list[str],
        steps: list[int | None],
        reasons: list[str],
    ) -> None:
        """The decisive failure goes on the import annotator's verdict: the one the first
        error just made, or a new submitted one (``found error``)."""
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO labeling_trajectorylabel (trajectory_id, annotator_id,"
                " decisive_agent, decisive_step, decisive_reason, finish_reason, status,"
                " submitted_at, created_at, updated_at)"
                " SELECT v.trajectory_id, v.annotator_id, v.agent, v.step, v.reason, %s, %s,"
                " %s, %s, %s"
                " FROM unnest(%s::bigint[], %s::int[], %s::text[], %s::int[], %s::text[])"
                " AS v(trajectory_id, annotator_id, agent, step, reason)"
                " ON CONFLICT (trajectory_id, annotator_id) DO UPDATE SET"
                " decisive_agent = EXCLUDED.decisive_agent,"
                " decisive_step = EXCLUDED.decisive_step,"
                " decisive_reason = EXCLUDED.decisive_reason",
                [
                    TrajectoryLabel.FinishReason.FOUND_ERROR.value,
                    TrajectoryLabel.Status.SUBMITTED.value,
                    now,
                    now,
                    now,
                    trajectories,
                    annotators,
                    agents,
                    steps,
                    reasons,
                ],
            )

    return ImportedLabels(steps=insert, verdicts=verdicts, decisive=decisive)
