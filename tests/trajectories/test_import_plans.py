"""What the import relies on in the schema and the planner, whichever way its chunks are
prepared (so these run once, not in both of test_import_chunks.py's import paths): no
trigger the key-check shortcut would silence, and index probes that survive stale
statistics."""

from __future__ import annotations

import pytest
from django.db import connection

from trajectories.services import import_writer, project_create

pytestmark = [pytest.mark.django_db, pytest.mark.services]


@pytest.mark.parametrize(
    "table", ["trajectories_step", "trajectories_trajectory", "trajectories_trajectorysource"]
)
def test_tables_written_without_checks_have_no_trigger_the_shortcut_would_silence(
    table: str,
) -> None:
    """session_replication_role = replica turns off every ordinary trigger on the
    import's COPY statements, not only the foreign-key checks; a trigger added to one of
    these tables later (history, counters) would silently not fire for imports. Revisit
    the shortcut in import_writer.ChunkWriter before adding one."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal",
            [table],
        )
        assert cursor.fetchall() == []


def test_duplicate_check_probes_the_unique_index_while_statistics_are_stale() -> None:
    """Inside one transaction a project fills up while the planner still believes it
    empty; the check must still probe the unique index rather than scan the project."""
    project = project_create(slug="stale", name="stale")
    digests = [f"{number:064x}" for number in range(3000)]
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO trajectories_trajectory (project_id, external_id, source_format,"
            " task_key, task, ground_truth, model_name, metadata, step_count, content_hash,"
            " created_at) SELECT %s, d, 'stepscope', '', '', '', '', '{}', 1, d, now()"
            " FROM unnest(%s::varchar[]) AS d",
            [project.pk, digests],
        )
        cursor.execute("EXPLAIN " + import_writer.EXISTING_HASHES_SQL, [digests[:200], project.pk])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "trajectory_unique_content_per_project" in plan, plan
    assert "Seq Scan on trajectories_trajectory" not in plan, plan
    assert import_writer.existing_hashes(project.pk, [*digests[:5], "f" * 64]) == set(digests[:5])


def test_children_are_found_through_the_index_of_trajectories_with_a_parent() -> None:
    """The parent key's index leaves out trajectories without a parent (most of them,
    and what a large import writes); lookups of children must still use it."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN SELECT id FROM trajectories_trajectory WHERE parent_id = %s", [5])
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'traj_parent'")
        (definition,) = cursor.fetchone() or ("",)
    assert "traj_parent" in plan, plan
    assert definition.endswith("WHERE (parent_id IS NOT NULL)"), definition
