"""A Celery worker killed (SIGKILL: no warm shutdown, no acknowledgement) in the middle of
an import and of an export. Another worker (started ahead, idle on a queue of its own
until the kill) takes the unacknowledged task again and finishes it: no duplicate rows,
no partial files. (Scoring, attribution and rollout chunks have the same test in
tests/scoring and tests/rollouts.)"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db.models import Count

from exports.models import ExportJob
from exports.services import export_plan_build, export_start
from tests.scoring.conftest import Workers
from tests.waiting import wait_until
from trajectories import synthetic
from trajectories.models import ImportBatch, Project, Step, Trajectory
from trajectories.services import import_upload_start

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

# x 4 rollouts x 7 steps: 28,000 steps in seven chunks of at most 4,000 steps
# (trajectories.prepare.CHUNK_STEPS), so a kill after the first chunk still lands with
# most of the work to go. More proves nothing more: the killed import is all or nothing,
# and the second worker imports (then exports) everything again.
TASKS = 1000


@pytest.fixture
def workers(transactional_db: None) -> Iterator[Workers]:
    from django.db import connection

    started = Workers(connection.settings_dict["NAME"])
    try:
        yield started
    finally:
        started.stop_all()


def test_killed_workers_lose_no_import_and_no_export(
    workers: Workers, project: Project, owner: User
) -> None:
    records = synthetic.rollouts(tasks=TASKS, seed=5)
    content = "".join(json.dumps(record) + "\n" for record in records).encode()
    expected = TASKS * 4

    # --- the import ----------------------------------------------------------------------
    second = workers.spare("kill-import-b")
    first = workers.start(["default"], "kill-import-a")
    batch = import_upload_start(
        project=project,
        user=owner,
        source_format="stepscope",
        upload=SimpleUploadedFile("big.jsonl", content),
    )

    def importing() -> bool:
        batch.refresh_from_db()
        return batch.status == ImportBatch.Status.RUNNING and batch.processed_count > 0

    assert wait_until(importing, timeout=120), f"never saw the import running: {batch.status}"
    workers.kill(first)
    batch.refresh_from_db()
    assert batch.status == ImportBatch.Status.RUNNING
    # All or nothing: the killed transaction left no trajectory behind.
    assert not Trajectory.objects.filter(project=project).exists()

    workers.take_over(second, ["default"])

    def imported() -> bool:
        batch.refresh_from_db()
        return batch.status not in (ImportBatch.Status.QUEUED, ImportBatch.Status.RUNNING)

    assert wait_until(imported, timeout=300), "the import never finished after the kill"
    assert batch.status == ImportBatch.Status.DONE, batch.errors
    assert batch.created_count == expected
    assert Trajectory.objects.filter(project=project).count() == expected
    duplicates = (
        Step.objects.filter(trajectory__project=project)
        .values("trajectory_id", "index")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    assert not duplicates.exists()
    steps = Step.objects.filter(trajectory__project=project).count()
    assert steps == expected * 7

    # --- the export ----------------------------------------------------------------------
    workers.stop_all()
    second = workers.spare("kill-export-b")
    first = workers.start(["default"], "kill-export-a")
    job = export_start(
        plan=export_plan_build(
            project=project, format="stepscope", labels="human:majority", neutral="drop"
        ),
        user=owner,
    )

    def exporting() -> bool:
        job.refresh_from_db()
        return job.status == ExportJob.Status.RUNNING and job.done > 0

    assert wait_until(exporting, timeout=120), f"never saw the export running: {job.status}"
    workers.kill(first)
    out_dir = Path(settings.MEDIA_ROOT) / "exports" / str(job.pk)
    # Nothing that looks finished: only hidden temporary files, if anything.
    assert all(path.name.startswith(".") for path in out_dir.glob("*"))

    workers.take_over(second, ["default"])

    def exported() -> bool:
        job.refresh_from_db()
        return job.status not in (ExportJob.Status.QUEUED, ExportJob.Status.RUNNING)

    assert wait_until(exported, timeout=300), "the export never finished after the kill"
    assert job.status == ExportJob.Status.DONE, job.error
    files = sorted(path.name for path in out_dir.iterdir())
    assert not [name for name in files if name.startswith(".")], files
    for entry in job.files:
        data = (out_dir / entry["name"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
    data_file = next(e["name"] for e in job.files if e["name"].endswith(".jsonl"))
    lines = (out_dir / data_file).read_bytes().count(b"\n")
    assert lines == expected


def test_a_second_delivery_of_a_finished_import_changes_nothing(
    project: Project, tmp_path: Path
) -> None:
    """A task handed out twice (it ran past the broker's visibility timeout): the second
    run read the batch as running, then waited for the project's import lock while the
    first run finished. It must leave the finished batch as it is."""
    from trajectories.prepare import file_chunks
    from trajectories.services.imports import _import_into

    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps(next(synthetic.rollouts(tasks=1, seed=9))) + "\n")
    batch = ImportBatch.objects.create(
        project=project,
        file_name="a.jsonl",
        source_format="stepscope",
        status=ImportBatch.Status.RUNNING,
        stored_path=str(path),
    )
    stale = ImportBatch.objects.get(pk=batch.pk)
    ImportBatch.objects.filter(pk=batch.pk).update(status=ImportBatch.Status.DONE, created_count=7)

    _import_into(stale, lambda: file_chunks(path, "stepscope"))

    batch.refresh_from_db()
    assert batch.status == ImportBatch.Status.DONE and batch.created_count == 7
    assert not Trajectory.objects.filter(project=project).exists()
