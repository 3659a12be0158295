"""The ``similar`` / ``similar_step`` filters of the selection language
(``trajectories.selection``): the trajectories whose steps mean nearest to a text or to
one step, among those the other filters pass, nearest first (``SELECTION_RANK``); and
``failure_mode``, the members of one failure mode. Registered with trajectories' selector
by ``DiscoveryConfig.ready()``."""

from __future__ import annotations

from functools import lru_cache

from django.contrib.postgres.fields import ArrayField
from django.db.models import BigIntegerField, F, Func, Q, QuerySet, Value

from discovery import selectors, store
from discovery.encoder import EncoderInfo, encoder_get
from discovery.models import FailureMode, FailureModeMember
from discovery.services import embedding_model_current, encoder_configured
from discovery.store import vector_text
from trajectories.models import Project, Step, Trajectory
from trajectories.selection import SelectionError, TrajectoryFilters
from trajectories.selectors import (
    SELECTION_RANK,
    trajectory_filter_register,
    trajectory_narrowing_register,
)


@trajectory_narrowing_register("similar")
def similar_narrowing(
    project: Project, filters: TrajectoryFilters, queryset: QuerySet[Trajectory], checking: bool
) -> QuerySet[Trajectory] | None:
    if not filters.ranked:
        return None
    name = "similar" if filters.similar else "similar_step"
    if not store.pgvector_available():
        raise SelectionError({name: store.PGVECTOR_MISSING})
    model = embedding_model_current()
    if model is None or not selectors.project_has_vectors(project, model):
        coverage = selectors.embedding_coverage(project, model)
        raise SelectionError(
            {
                name: f"no step of project {project.slug!r} is embedded yet (0 of"
                f" {coverage.total} steps); embeddings are built by a worker after each"
                " import, or by manage.py embeddings_backfill"
            }
        )
    if filters.similar_step is not None:
        vector = selectors.step_vector_text(model, project, filters.similar_step)
        if vector is None:
            if not Step.objects.filter(
                pk=filters.similar_step, trajectory__project=project
            ).exists():
                message = f"no step {filters.similar_step} in project {project.slug!r}"
            else:
                coverage = selectors.embedding_coverage(project, model)
                message = (
                    f"step {filters.similar_step} is not embedded yet ({coverage.embedded}"
                    f" of {coverage.total} steps are)"
                )
            raise SelectionError({"similar_step": message})
    else:
        vector = _text_vector(encoder_configured(), filters.similar)
    if checking:
        # The walk is the query's cost (hundreds of ms at a million steps); the list runs
        # it once, for its page.
        return queryset.annotate(**{SELECTION_RANK: Value(0, output_field=BigIntegerField())})
    nearest = selectors.nearest_trajectories(
        model,
        vector,
        queryset,
        with_tasks=filters.similar_step is None,
        exclude_step=filters.similar_step,
    )
    ids = [trajectory_id for trajectory_id, _ in nearest]
    rank = Func(
        Value(ids, output_field=ArrayField(BigIntegerField())),
        F("id"),
        function="array_position",
        output_field=BigIntegerField(),
    )
    return queryset.filter(id__in=ids).annotate(**{SELECTION_RANK: rank})


@lru_cache(maxsize=256)
def _text_vector(info: EncoderInfo, text: str) -> str:
    """A query text's vector, kept: the list page checks its selection, then lists it,
    and a next page asks again."""
    return vector_text(encoder_get(info).encode([text])[0])


@trajectory_filter_register("failure_mode")
def failure_mode_condition(project: Project, filters: TrajectoryFilters) -> Q | None:
    """The trajectories whose first error a failure mode of the project holds."""
    if filters.failure_mode is None:
        return None
    if not FailureMode.objects.filter(pk=filters.failure_mode, run__project=project).exists():
        raise SelectionError(
            {"failure_mode": f"no failure mode {filters.failure_mode} in project {project.slug!r}"}
        )
    members = FailureModeMember.objects.filter(mode_id=filters.failure_mode)
    return Q(pk__in=members.values("trajectory_id"))
