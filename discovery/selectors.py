"""Named reads of semantic search: how much of a project is embedded, and the steps
nearest to a vector among a selection's trajectories."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import QuerySet

from discovery import store
from discovery.models import EmbeddingModel
from trajectories.models import Project, Trajectory

# How many nearest steps (and tasks) a semantic query takes among the selection's
# trajectories; their trajectories, nearest step first, are the selection. pgvector's
# HNSW walk returns at most ``hnsw.ef_search`` (1,000 at most) rows a pass; the iterative
# scan goes on while the other filters reject what it found.
NEAREST_STEPS = 1000


@dataclass(frozen=True)
class Coverage:
    embedded: int
    total: int


def embedding_coverage(project: Project, model: EmbeddingModel | None) -> Coverage:
    """How many of the project's steps have a vector of ``model``, of how many."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(step_count), 0) FROM trajectories_trajectory"
            " WHERE project_id = %s",
            [project.pk],
        )
        total = int(cursor.fetchone()[0])
        embedded = 0
        if model is not None and store.pgvector_available():
            cursor.execute(
                f"""SELECT count(*) FROM {store.STEP_TABLE} v
                JOIN trajectories_trajectory t ON t.id = v.trajectory_id
                WHERE v.model_id = %s AND t.project_id = %s""",
                [model.pk, project.pk],
            )
            embedded = int(cursor.fetchone()[0])
    return Coverage(embedded, total)


def project_has_vectors(project: Project, model: EmbeddingModel | None) -> bool:
    """Whether some step of the project has a vector of ``model``: what a query checks
    (counting them all cost a semantic query ~10% of its time at 100,000 vectors)."""
    if model is None or not store.pgvector_available():
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT EXISTS (SELECT 1 FROM {store.STEP_TABLE} v
            JOIN trajectories_trajectory t ON t.id = v.trajectory_id
            WHERE v.model_id = %s AND t.project_id = %s)""",
            [model.pk, project.pk],
        )
        return bool(cursor.fetchone()[0])


def step_vector_text(model: EmbeddingModel, project: Project, step_id: int) -> str | None:
    """A step's stored vector (pgvector's text), or None where it has none."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT v.embedding::text FROM {store.STEP_TABLE} v
            JOIN trajectories_trajectory t ON t.id = v.trajectory_id
            WHERE v.model_id = %s AND v.step_id = %s AND t.project_id = %s""",
            [model.pk, step_id, project.pk],
        )
        row = cursor.fetchone()
    return None if row is None else str(row[0])


def nearest_query(
    model: EmbeddingModel,
    vector: str,
    among: QuerySet[Trajectory],
    *,
    with_tasks: bool,
    exclude_step: int | None = None,
    limit: int = NEAREST_STEPS,
) -> tuple[str, list[Any]]:
    """The SQL of ``nearest_trajectories`` and its parameters (the bench explains it)."""
    among_sql, among_params = among.order_by().values("id").query.sql_with_params()
    dim = int(model.dim)
    distance = f"embedding::vector({dim}) <=> %s::vector({dim})"
    parts = [
        f"""(SELECT trajectory_id, {distance} AS d FROM {store.STEP_TABLE}
        WHERE model_id = %s AND trajectory_id IN ({among_sql})
        {"AND step_id <> %s" if exclude_step is not None else ""}
        ORDER BY d LIMIT %s)"""
    ]
    params: list[Any] = [vector, model.pk, *among_params]
    if exclude_step is not None:
        params.append(exclude_step)
    params.append(limit)
    if with_tasks:
        parts.append(
            f"""(SELECT trajectory_id, {distance} AS d FROM {store.TASK_TABLE}
            WHERE model_id = %s AND trajectory_id IN ({among_sql}) ORDER BY d LIMIT %s)"""
        )
        params += [vector, model.pk, *among_params, limit]
    sql = (
        f"SELECT trajectory_id, min(d) AS d FROM ({' UNION ALL '.join(parts)}) nearest"
        " GROUP BY trajectory_id ORDER BY d, trajectory_id"
    )
    return sql, params


def nearest_settings(limit: int = NEAREST_STEPS) -> list[str]:
    """The settings (``SET LOCAL``) the nearest query runs under."""
    return [
        # The filters apply inside the index walk: it goes on past rows they reject.
        "SET LOCAL hnsw.iterative_scan = relaxed_order",
        f"SET LOCAL hnsw.ef_search = {min(max(limit, 40), 1000)}",
    ]


def nearest_trajectories(
    model: EmbeddingModel,
    vector: str,
    among: QuerySet[Trajectory],
    *,
    with_tasks: bool,
    exclude_step: int | None = None,
    limit: int = NEAREST_STEPS,
) -> list[tuple[int, float]]:
    """(trajectory id, cosine distance of its nearest step or task), nearest first, from
    the ``limit`` steps (and tasks) nearest to ``vector`` among ``among``'s trajectories."""
    sql, params = nearest_query(
        model, vector, among, with_tasks=with_tasks, exclude_step=exclude_step, limit=limit
    )
    with transaction.atomic(), connection.cursor() as cursor:
        for setting in nearest_settings(limit):
            cursor.execute(setting)
        cursor.execute(sql, params)
        return [(int(row[0]), float(row[1])) for row in cursor.fetchall()]
