"""An import that grew tables by much has them analysed as soon as it commits, so the
pages after it are planned for the tables as they are: a file's in the importing process,
a push's by a worker."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from stepscope.statistics import grown_tables
from tests.conftest import REALDATA, celery_worker_log
from tests.waiting import wait_until
from trajectories.models import Project
from trajectories.services import trajectory_import, trajectory_records_import

PROCESSBENCH = REALDATA / "processbench" / "gsm8k.json"
TABLES = ("trajectories_trajectory", "trajectories_step", "labeling_steplabel")


def analyses() -> dict[str, int]:
    """How many times each table was analysed by hand (autovacuum's own are apart)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT relname, analyze_count FROM pg_stat_user_tables WHERE relname = ANY(%s)",
            [list(TABLES)],
        )
        return dict(cursor.fetchall())


@pytest.mark.django_db
def test_a_file_import_analyses_the_tables_it_grew_once_it_commits(
    project: Project, django_capture_on_commit_callbacks: Any
) -> None:
    before = analyses()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        batch = trajectory_import(project=project, source_format="processbench", path=PROCESSBENCH)
        # Labels came with the records: the labeling app's table grew too.
        grown = grown_tables()
    assert batch.created_count > 100
    assert {f"public.{table}" for table in TABLES} <= set(grown)
    assert analyses() == before  # nothing yet: the import has not committed
    for callback in callbacks:
        callback()
    after = analyses()
    assert all(after[table] == before[table] + 1 for table in TABLES), (before, after)


@pytest.mark.django_db(transaction=True)
def test_a_push_has_a_worker_analyse_the_tables_it_grew(
    project: Project, celery_worker: object
) -> None:
    with connection.cursor() as cursor:
        # The tables start empty (a flush): a thousand steps is growth, whatever ran before.
        cursor.execute("ANALYZE trajectories_trajectory, trajectories_step")
    before = analyses()
    records = [
        {"id": f"r{n}", "task": f"task {n}", "steps": [{"content": f"s{i}"} for i in range(5)]}
        for n in range(200)
    ]
    trajectory_records_import(project=project, records=records)

    def analysed() -> bool:
        after = analyses()
        return all(
            after[table] > before[table]
            for table in ("trajectories_trajectory", "trajectories_step")
        )

    assert wait_until(analysed, timeout=30), celery_worker_log()
