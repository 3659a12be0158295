"""The vector tables, in SQL: pgvector's ``vector`` type has no Django field here (no new
dependency), and the tables exist only where the server has the extension, so they are
created by :func:`vector_tables_ensure` (from the migration, and again by
``manage.py embeddings_backfill`` once an operator has installed pgvector), not by a
model's migration.

``discovery_step_vector`` holds one row per (encoder, step), ``discovery_task_vector`` one
per (encoder, trajectory) for the task text. The column is an untyped ``vector`` so a
bigger encoder fits; each encoder gets its own partial HNSW index on the column cast to its
width (``vector_index_ensure``), which is what pgvector documents for mixed widths."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import DatabaseError, connection, transaction

PGVECTOR_MISSING = "semantic search needs the pgvector extension on the database server"

STEP_TABLE = "discovery_step_vector"
TASK_TABLE = "discovery_task_vector"

_TABLES_SQL = (
    f"""CREATE TABLE IF NOT EXISTS {STEP_TABLE} (
        model_id bigint NOT NULL REFERENCES discovery_embeddingmodel(id) ON DELETE CASCADE,
        step_id bigint NOT NULL REFERENCES trajectories_step(id) ON DELETE CASCADE,
        trajectory_id bigint NOT NULL
            REFERENCES trajectories_trajectory(id) ON DELETE CASCADE,
        embedding vector NOT NULL,
        PRIMARY KEY (model_id, step_id))""",
    f"""CREATE INDEX IF NOT EXISTS {STEP_TABLE}_trajectory
        ON {STEP_TABLE} (model_id, trajectory_id)""",
    f"""CREATE TABLE IF NOT EXISTS {TASK_TABLE} (
        model_id bigint NOT NULL REFERENCES discovery_embeddingmodel(id) ON DELETE CASCADE,
        trajectory_id bigint NOT NULL
            REFERENCES trajectories_trajectory(id) ON DELETE CASCADE,
        embedding vector NOT NULL,
        PRIMARY KEY (model_id, trajectory_id))""",
)


def vector_tables_ensure(using_connection: Any = None) -> bool:
    """Create the extension (where the server offers it and we may) and the tables.
    Whether semantic search is on. Never raises for a server without pgvector: the rest
    of the app works there, and the migration that calls this still runs."""
    conn = using_connection or connection
    with conn.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
        if cursor.fetchone() is None:
            cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
            if cursor.fetchone() is None:
                return False
            try:
                with transaction.atomic(using=conn.alias):
                    cursor.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except DatabaseError:
                # Offered but not ours to create (not a superuser): off, as if missing.
                return False
        for statement in _TABLES_SQL:
            cursor.execute(statement)
    _AVAILABLE.clear()
    return True


_AVAILABLE: dict[str, bool] = {}


def pgvector_available() -> bool:
    """Whether the vector tables exist on this database (cached per process and database)."""
    name = str(connection.settings_dict["NAME"])
    if name not in _AVAILABLE:
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [STEP_TABLE])
            _AVAILABLE[name] = bool(cursor.fetchone()[0])
    return _AVAILABLE[name]


def vector_index_ensure(model_id: int, dim: int) -> None:
    """The encoder's HNSW indexes (cosine), partial on its rows."""
    for table in (STEP_TABLE, TASK_TABLE):
        with connection.cursor() as cursor:
            cursor.execute(
                f"CREATE INDEX IF NOT EXISTS {table}_hnsw_{int(model_id)} ON {table}"
                f" USING hnsw ((embedding::vector({int(dim)})) vector_cosine_ops)"
                f" WHERE model_id = {int(model_id)}"
            )


def step_vectors_write(model_id: int, rows: Sequence[tuple[int, int]], vectors: Any) -> int:
    """Store ``vectors`` for the (step id, trajectory id) ``rows``; a step already stored
    (a redelivered chunk) is kept. How many were new."""
    if not rows:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {STEP_TABLE} (model_id, step_id, trajectory_id, embedding)
            SELECT %s, s, t, v::vector
            FROM unnest(%s::bigint[], %s::bigint[], %s::text[]) AS u(s, t, v)
            ON CONFLICT DO NOTHING""",
            [
                model_id,
                [step for step, _ in rows],
                [trajectory for _, trajectory in rows],
                [vector_text(v) for v in vectors],
            ],
        )
        return int(cursor.rowcount)


def task_vectors_write(model_id: int, trajectory_ids: Sequence[int], vectors: Any) -> int:
    if not trajectory_ids:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {TASK_TABLE} (model_id, trajectory_id, embedding)
            SELECT %s, t, v::vector FROM unnest(%s::bigint[], %s::text[]) AS u(t, v)
            ON CONFLICT DO NOTHING""",
            [model_id, list(trajectory_ids), [vector_text(v) for v in vectors]],
        )
        return int(cursor.rowcount)


def vector_text(row: Any) -> str:
    """A vector as pgvector's text input reads it: ``[0.1,0.2]``."""
    return "[" + ",".join(f"{float(x):.7g}" for x in row) + "]"
