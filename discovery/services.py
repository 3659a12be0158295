"""Writes of semantic search: the encoder's row, the embedding pass over a project's steps
and tasks (resumable: only what has no vector for the current encoder), and queueing it
after an arrival."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from discovery import store
from discovery.encoder import EncoderInfo, encoder_get, encoder_info
from discovery.models import EmbeddingModel
from trajectories.arrivals import Arrival

logger = logging.getLogger(__name__)

# Steps read, embedded and written per round: a killed worker loses at most one round,
# and the next pass starts from what is stored.
CHUNK_STEPS = 512


def encoder_configured() -> EncoderInfo:
    return encoder_info(settings.STEPSCOPE_EMBEDDING_MODEL, settings.STEPSCOPE_EMBEDDING_REVISION)


def embedding_model_current(*, create: bool = False) -> EmbeddingModel | None:
    """The configured encoder's row; with ``create``, made (loading the encoder for its
    width) with its HNSW indexes where it is new."""
    info = encoder_configured()
    found = EmbeddingModel.objects.filter(name=info.name, revision=info.revision).first()
    if found is not None or not create:
        return found
    dim = encoder_get(info).dim
    with transaction.atomic():
        model, _ = EmbeddingModel.objects.get_or_create(
            name=info.name, revision=info.revision, defaults={"dim": dim}
        )
        store.vector_index_ensure(model.pk, model.dim)
    return model


@dataclass(frozen=True)
class BuildResult:
    steps: int
    tasks: int


def step_text(content: str, tool_name: str, tool_args: Any) -> str:
    """What a step says: its text, or for a bare tool call the tool and its arguments."""
    if content.strip() or not tool_name:
        return content
    return f"{tool_name}({json.dumps(tool_args, sort_keys=True)[:2000] if tool_args else ''})"


def embeddings_build(
    *,
    project_id: int,
    trajectory_ids: Sequence[int] | None = None,
    import_batch_id: int | None = None,
    chunk_steps: int = CHUNK_STEPS,
) -> BuildResult:
    """Embed the steps and tasks of a project (or of some of its trajectories, or of an
    import's) that have no vector for the configured encoder, a chunk at a time, each
    chunk committed on its own. Nothing where pgvector is missing."""
    if not store.pgvector_available():
        return BuildResult(0, 0)
    model = embedding_model_current(create=True)
    assert model is not None
    encoder = encoder_get(encoder_configured())
    scope, scope_params = _scope(project_id, trajectory_ids, import_batch_id)
    steps = tasks = 0
    step_sql = f"""SELECT s.id, s.trajectory_id, s.content, s.tool_name, s.tool_args
        FROM trajectories_step s JOIN trajectories_trajectory t ON t.id = s.trajectory_id
        WHERE {scope} AND s.id > %s AND NOT EXISTS (
            SELECT 1 FROM {store.STEP_TABLE} v WHERE v.model_id = %s AND v.step_id = s.id)
        ORDER BY s.id LIMIT %s"""
    for rows in _chunks(step_sql, scope_params, model.pk, chunk_steps):
        vectors = encoder.encode([step_text(r[2], r[3], json_value(r[4])) for r in rows])
        with transaction.atomic():
            steps += store.step_vectors_write(model.pk, [(r[0], r[1]) for r in rows], vectors)
    task_sql = f"""SELECT t.id, t.task FROM trajectories_trajectory t
        WHERE {scope} AND t.id > %s AND t.task <> '' AND NOT EXISTS (
            SELECT 1 FROM {store.TASK_TABLE} v WHERE v.model_id = %s AND v.trajectory_id = t.id)
        ORDER BY t.id LIMIT %s"""
    for rows in _chunks(task_sql, scope_params, model.pk, chunk_steps):
        vectors = encoder.encode([r[1] for r in rows])
        with transaction.atomic():
            tasks += store.task_vectors_write(model.pk, [r[0] for r in rows], vectors)
    return BuildResult(steps, tasks)


def _chunks(
    sql: str, scope_params: list[Any], model_id: int, size: int
) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of ``sql`` (scope, then ``id > %s``, the model, ``LIMIT %s``; ordered by
    the id in the first column) ``size`` at a time, each chunk read after the last one's
    vectors were written, so a stopped pass resumes where it was."""
    after = 0
    while True:
        with connection.cursor() as cursor:
            cursor.execute(sql, [*scope_params, after, model_id, size])
            rows = cursor.fetchall()
        if not rows:
            return
        yield rows
        after = rows[-1][0]


def json_value(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _scope(
    project_id: int, trajectory_ids: Sequence[int] | None, import_batch_id: int | None
) -> tuple[str, list[Any]]:
    conditions: list[str] = ["t.project_id = %s"]
    params: list[Any] = [project_id]
    if trajectory_ids:
        conditions.append("t.id = ANY(%s)")
        params.append(list(trajectory_ids))
    if import_batch_id is not None:
        conditions.append("t.import_batch_id = %s")
        params.append(import_batch_id)
    return " AND ".join(conditions), params


def embeddings_queue(
    *, project_id: int, trajectory_ids: Sequence[int] = (), import_batch_id: int | None = None
) -> bool:
    """Queue an embedding pass; a broker that is down costs only the wait (the next pass,
    or ``manage.py embeddings_backfill``, embeds what this one would have). Whether it
    was queued."""
    from discovery import tasks

    try:
        tasks.embed.apply_async(
            args=[project_id, list(trajectory_ids), import_batch_id],
            queue=settings.STEPSCOPE_EMBEDDING_QUEUE,
        )
    except Exception as error:  # kombu raises several kinds; all mean "down"
        logger.warning("embedding pass of project %s not queued: %s", project_id, error)
        return False
    return True


def embeddings_arrived(arrival: Arrival) -> None:
    """The arrival listener: new or grown trajectories get an embedding pass."""
    if not settings.STEPSCOPE_EMBED_ON_ARRIVAL or not store.pgvector_available():
        return
    embeddings_queue(
        project_id=arrival.project_id,
        trajectory_ids=arrival.trajectory_ids,
        import_batch_id=arrival.import_batch_id,
    )
