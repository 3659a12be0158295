"""The search index (``trajectories.search``): documents for the trajectories that have
none yet, written by a worker after an import commits, a thousand trajectories per
transaction, so a reader sees each trajectory indexed whole or not at all."""

from __future__ import annotations

from django.db import connection, transaction

from stepscope.queueing import send_if_up
from stepscope.statistics import analyze
from trajectories.search import search_document_sql

SEARCH_INDEX_CHUNK = 1000
# Past this many step documents written in one indexing, the search tables are analysed
# at its end: written a chunk at a time, they never grow by much in one transaction, and
# until autovacuum's next round the planner took a trajectory's documents for a
# thousand times more than they are and read the whole word index per trajectory (2 s
# for a page of ten thousand steps after a million-step import).
SEARCH_ANALYZE_AFTER = 10_000

# The trajectory row goes in first, and ON CONFLICT makes a second worker on the same
# project skip the trajectories the first has taken; only the trajectories this statement
# marked get their step documents.
_INDEX_CHUNK_SQL = f"""
WITH chosen AS (
    SELECT t.id, t.task FROM trajectories_trajectory t
    WHERE t.project_id = %s
      AND NOT EXISTS (SELECT 1 FROM trajectories_trajectorysearch x WHERE x.trajectory_id = t.id)
    ORDER BY t.id LIMIT %s
), marked AS (
    INSERT INTO trajectories_trajectorysearch (trajectory_id, document)
    SELECT id, {search_document_sql("task")} FROM chosen
    ON CONFLICT DO NOTHING
    RETURNING trajectory_id
)
INSERT INTO trajectories_stepsearch (step_id, trajectory_id, document)
SELECT s.id, s.trajectory_id, {search_document_sql("s.content")}
FROM trajectories_step s JOIN marked m ON s.trajectory_id = m.trajectory_id
ON CONFLICT DO NOTHING
"""


def trajectory_search_index(*, project_id: int, chunk: int = SEARCH_INDEX_CHUNK) -> int:
    """Index every trajectory of the project that has no search document; returns how
    many step documents were written. Safe to run twice at once and to redeliver."""
    written = 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(_INDEX_CHUNK_SQL, [project_id, chunk])
            steps = cursor.rowcount
            cursor.execute(
                "SELECT EXISTS (SELECT 1 FROM trajectories_trajectory t WHERE t.project_id = %s"
                " AND NOT EXISTS (SELECT 1 FROM trajectories_trajectorysearch x"
                " WHERE x.trajectory_id = t.id))",
                [project_id],
            )
            more = cursor.fetchone()[0]
        written += max(steps, 0)
        if not more:
            if written >= SEARCH_ANALYZE_AFTER:
                analyze(["trajectories_stepsearch", "trajectories_trajectorysearch"])
            return written


def search_index_enqueue(project_id: int) -> None:
    """Queue the indexing of a project's new trajectories. A broker that is down costs
    nothing but speed: unindexed trajectories are searched by reading their text."""
    from trajectories.tasks import search_index

    send_if_up(search_index, project_id, what=f"search index of project {project_id}")
