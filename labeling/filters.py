"""The trajectory filters on labels (``TrajectoryFilters``' label status, agreement,
human against model and first error), registered with trajectories' selector by
``LabelingConfig.ready()``: they read labeling's tables, which trajectories may not."""

from __future__ import annotations

from django.db.models import Exists, OuterRef, Q
from django.db.models.expressions import RawSQL

from labeling.models import LabelSchema, StepLabel
from labeling.sources import LabelSource, SchemaScope, label_schema_scope, label_source_sql
from trajectories.models import Project, Step
from trajectories.selection import SelectionError, TrajectoryFilters
from trajectories.selectors import trajectory_filter_register


def _scope(project: Project, filters: TrajectoryFilters) -> SchemaScope:
    """The label schema the filters read (``label_schema``, else the project's one)."""
    try:
        return label_schema_scope(project, filters.label_schema)
    except ValueError as error:
        raise SelectionError({"label_schema": str(error)}) from None


@trajectory_filter_register("label_schema")
def label_schema_condition(project: Project, filters: TrajectoryFilters) -> Q | None:
    """Chooses nothing by itself (the label filters read it); a schema the project
    lacks is refused here, with the filters that would read it or without."""
    if filters.label_schema:
        _scope(project, filters)
    return None


@trajectory_filter_register("label_status")
def label_status_condition(project: Project, filters: TrajectoryFilters) -> Q | None:
    if not filters.label_status:
        return None
    submitted = StepLabel.objects.filter(
        step=OuterRef("pk"),
        status=StepLabel.Status.SUBMITTED,
        schema_id__in=_scope(project, filters).ids,
    )
    labelable = Step.objects.filter(trajectory=OuterRef("pk"), labelable=True)
    labelled = Exists(labelable.filter(Exists(submitted)))
    unlabelled_step = Exists(labelable.filter(~Exists(submitted)))
    if filters.label_status == "unlabelled":
        return ~Q(labelled)
    if filters.label_status == "partial":
        return Q(labelled) & Q(unlabelled_step)
    return Q(labelled) & ~Q(unlabelled_step)


@trajectory_filter_register("min_agreement")
def agreement_condition(project: Project, filters: TrajectoryFilters) -> Q | None:
    if filters.min_agreement is None:
        return None
    # Per step: the human annotators (not imported labels) and the distinct values they
    # gave; a step counts when two or more labelled it, and agrees when one value.
    agreeing = RawSQL(
        "SELECT trajectory_id FROM ("
        "  SELECT s.trajectory_id, count(DISTINCT l.value) AS n_values"
        "  FROM labeling_steplabel l"
        "  JOIN auth_user u ON u.id = l.annotator_id"
        "  JOIN trajectories_step s ON s.id = l.step_id"
        "  JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
        "  WHERE t.project_id = %s AND l.status = 'submitted' AND l.schema_id = ANY(%s)"
        "    AND u.username NOT LIKE 'import:%%'"
        "  GROUP BY s.trajectory_id, s.id HAVING count(DISTINCT l.annotator_id) >= 2"
        ") per_step GROUP BY trajectory_id"
        " HAVING count(*) FILTER (WHERE n_values = 1) >= %s * count(*)",
        [project.pk, list(_scope(project, filters).ids), filters.min_agreement],
    )
    return Q(pk__in=agreeing)


@trajectory_filter_register("human_model")
def human_model_condition(project: Project, filters: TrajectoryFilters) -> Q | None:
    if not filters.human_model:
        return None
    human, human_params = label_source_sql(
        project, LabelSource("human", "majority", schema=_scope(project, filters).name)
    )
    try:
        model, model_params = label_source_sql(
            project, LabelSource("model", filters.model_scorer, threshold=filters.model_threshold)
        )
    except ValueError as error:
        raise SelectionError({"model_scorer": str(error)}) from None
    compared = (
        f"SELECT s.trajectory_id FROM ({human}) h JOIN ({model}) m ON m.step_id = h.step_id"
        " JOIN trajectories_step s ON s.id = h.step_id WHERE h.value <> 0"
    )
    params = [*human_params, *model_params]
    differing = RawSQL(f"{compared} AND h.value <> m.value", params)
    if filters.human_model == "disagree":
        return Q(pk__in=differing)
    return Q(pk__in=RawSQL(compared, params)) & ~Q(pk__in=differing)


@trajectory_filter_register("first_error")
def first_error_condition(project: Project, filters: TrajectoryFilters) -> Q | None:
    if not filters.first_error:
        return None
    scope = _scope(project, filters)
    newest = LabelSchema.objects.filter(pk__in=scope.ids).order_by("-version").first()
    error = newest.error_value if newest is not None else None
    errors = StepLabel.objects.filter(
        step__trajectory=OuterRef("pk"),
        status=StepLabel.Status.SUBMITTED,
        schema_id__in=scope.ids,
        value=error if error is not None else -1,
    )
    return Q(Exists(errors)) if filters.first_error == "yes" else ~Q(Exists(errors))


@trajectory_filter_register("advantage_disagrees")
def advantage_disagrees_condition(project: Project, filters: TrajectoryFilters) -> Q | None:
    """Some step's trainer advantage has the other sign than its human majority label: a
    positive advantage on a step labelled wrong, or a negative one on a step labelled
    right (the credit the trainer gave against what people said)."""
    if filters.advantage_disagrees != "yes":
        return None
    human, params = label_source_sql(
        project, LabelSource("human", "majority", schema=_scope(project, filters).name)
    )
    disagreeing = RawSQL(
        f"SELECT s.trajectory_id FROM ({human}) h JOIN trajectories_step s ON s.id = h.step_id"
        " WHERE (s.advantage > 0 AND h.value < 0) OR (s.advantage < 0 AND h.value > 0)",
        params,
    )
    return Q(pk__in=disagreeing)
