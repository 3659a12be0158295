"""The import writer's large-file machinery: chunks, the helper process that prepares
them, steps streamed with COPY before their trajectories, labels found by step index,
and the foreign-key shortcut. Small chunk sizes make a few records cross several chunks,
and each test runs with the chunks prepared in this process and in the helper."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from labeling.models import StepLabel
from tests.conftest import REALDATA
from trajectories import prepare, synthetic
from trajectories.formats.base import RecordError
from trajectories.hashing import prefix_hashes
from trajectories.models import ImportBatch, Project, Step, Trajectory
from trajectories.services import (
    ImportRejected,
    import_writer,
    imports,
    project_create,
    trajectory_import,
    trajectory_records_import,
)

pytestmark = [pytest.mark.django_db, pytest.mark.services]


@pytest.fixture(autouse=True, params=["in-process", "helper"])
def small_chunks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(prepare, "CHUNK_TRAJECTORIES", 3)
    monkeypatch.setattr(prepare, "CHUNK_STEPS", 20)
    # Trajectory rows written every few chunks, not only at the end.
    monkeypatch.setattr(import_writer, "PENDING_TRAJECTORIES", 5)
    monkeypatch.setattr(import_writer, "ID_BLOCK", 4)
    # The helper's chunks read one at a time, so the reader waits on the writer too.
    monkeypatch.setattr(prepare, "READ_AHEAD_BYTES", 1)
    helper_from = 0 if request.param == "helper" else 1 << 40
    monkeypatch.setattr(prepare, "HELPER_FROM_BYTES", helper_from)
    return str(request.param)


def labelled_records(count: int) -> list[dict[str, Any]]:
    records = list(synthetic.rollouts(tasks=count // 2, rollouts_per_task=2, seed=4))
    for number, record in enumerate(records):
        # One labelled step among plain ones: both parser paths, and labels in chunks.
        for step in record["steps"]:
            step.pop("labels", None)
        record["steps"][1]["labels"] = [{"annotator": "import:test", "value": number % 2}]
    return records


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def assert_step_keys_hold_and_checks_back_on() -> None:
    """Written without the row-by-row check, the key must still hold for every step,
    and the checks must be on again after the import."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM trajectories_step s"
            " LEFT JOIN trajectories_trajectory t ON t.id = s.trajectory_id WHERE t.id IS NULL"
        )
        assert cursor.fetchone() == (0,)
        cursor.execute("SHOW session_replication_role")
        assert cursor.fetchone() == ("origin",)


def test_many_chunks_write_every_row_once_with_consistent_keys(tmp_path: Path) -> None:
    records = labelled_records(10)
    # Repeats of line 1 in a later chunk and of line 4 in the same chunk.
    path = write(tmp_path / "runs.jsonl", [*records, records[0], records[3]])
    project = project_create(slug="chunks", name="chunks")

    batch = trajectory_import(project=project, source_format="stepscope", path=path)

    assert (batch.created_count, batch.unchanged_count) == (10, 2)
    assert batch.step_count == Step.objects.count() == sum(len(r["steps"]) for r in records)
    for record in records:
        trajectory = Trajectory.objects.get(external_id=record["id"])
        steps = list(trajectory.steps.order_by("index"))
        assert [s.content for s in steps] == [s["content"] for s in record["steps"]]
        assert [s.index for s in steps] == list(range(len(record["steps"])))
        assert trajectory.step_count == len(steps)
        label = StepLabel.objects.get(step__trajectory=trajectory)
        assert (label.step.index, label.value) == (1, records.index(record) % 2)
    assert_step_keys_hold_and_checks_back_on()


def probed_digests(path: Path, project_slug: str) -> tuple[ImportBatch, list[str]]:
    """Import ``path`` into the project; return the batch and the digests the
    duplicate check asked the database about."""
    project = Project.objects.get(slug=project_slug)
    with CaptureQueriesContext(connection) as queries:
        batch = trajectory_import(project=project, source_format="stepscope", path=path)
    probes = [q["sql"] for q in queries.captured_queries if "CROSS JOIN LATERAL" in q["sql"]]
    return batch, [d for sql in probes for d in re.findall(r"[0-9a-f]{64}", sql)]


def test_a_new_project_probes_only_digests_this_import_may_have_written(
    tmp_path: Path,
) -> None:
    records = labelled_records(10)
    project_create(slug="probes", name="probes")
    batch, probed = probed_digests(write(tmp_path / "a.jsonl", [*records, records[0]]), "probes")
    # Only the repeat of line 1, in a later chunk, is asked about (and found).
    repeated = Trajectory.objects.get(external_id=records[0]["id"]).content_hash
    assert (batch.created_count, batch.unchanged_count) == (10, 1)
    assert probed == [repeated]

    # The project now has trajectories: every digest of the next import is asked about.
    more = list(synthetic.rollouts(tasks=2, rollouts_per_task=2, seed=9))
    batch, probed = probed_digests(write(tmp_path / "b.jsonl", [*more, *records]), "probes")
    assert (batch.created_count, batch.unchanged_count) == (4, 10)
    assert len(set(probed)) == 14


def test_repeats_of_trajectories_written_or_still_held_back_are_unchanged(
    tmp_path: Path,
) -> None:
    """Without labels, trajectory rows wait to be written a few chunks at a time: a
    repeat is found among those waiting, in the filter, or in the database."""
    records = list(synthetic.rollouts(tasks=6, rollouts_per_task=2, seed=5))
    for record in records:
        for step in record["steps"]:
            step.pop("labels", None)
    # Line 1 again long after it was written; line 11 again while it still waits.
    path = write(tmp_path / "runs.jsonl", [*records, records[0], records[10]])
    project = project_create(slug="held", name="held")

    batch = trajectory_import(project=project, source_format="stepscope", path=path)

    assert (batch.created_count, batch.unchanged_count) == (12, 2)
    assert Trajectory.objects.filter(project=project).count() == 12
    assert batch.step_count == Step.objects.count() == sum(len(r["steps"]) for r in records)
    assert_step_keys_hold_and_checks_back_on()
    # Into the project that now holds them, the same file changes nothing.
    again = trajectory_import(project=project, source_format="stepscope", path=path)
    assert (again.created_count, again.unchanged_count) == (0, 14)


def plain_records(count: int, seed: int) -> list[dict[str, Any]]:
    """Records without labels or verdicts: only their steps and rows are written."""
    records = list(synthetic.rollouts(tasks=count // 2, rollouts_per_task=2, seed=seed))
    for record in records:
        record.pop("first_error_index", None)
        for step in record["steps"]:
            step.pop("labels", None)
    return records


def probes_in(queries: CaptureQueriesContext) -> list[list[str]]:
    """The digests of each duplicate probe among the captured queries."""
    sqls = [q["sql"] for q in queries.captured_queries if "CROSS JOIN LATERAL" in q["sql"]]
    return [re.findall(r"[0-9a-f]{64}", sql) for sql in sqls]


def test_later_chunks_are_asked_about_at_once_when_the_first_has_no_repeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Into a project that has trajectories, a push's first chunk is asked about before
    its steps are written; the rest, written unasked, in one probe before their rows:
    asking chunk by chunk ended the step COPY each time."""
    monkeypatch.setattr(import_writer, "PENDING_TRAJECTORIES", 1000)
    records = plain_records(12, seed=11)
    monkeypatch.setattr(imports, "PUSH_CHUNK_STEPS", len(records[0]["steps"]) * 2)
    project = project_create(slug="ask-later", name="ask-later")
    trajectory_records_import(project=project, records=records[:2])

    with CaptureQueriesContext(connection) as queries:
        batch = trajectory_records_import(project=project, records=records[2:])

    assert (batch.created_count, batch.unchanged_count) == (10, 0)
    probes = probes_in(queries)
    assert [len(digests) for digests in probes] == [2, 8], probes
    assert Step.objects.filter(trajectory__project=project).count() == sum(
        len(r["steps"]) for r in records
    )


def test_a_repeat_written_unasked_is_taken_back_and_later_chunks_are_asked_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records = plain_records(16, seed=12)
    monkeypatch.setattr(imports, "PUSH_CHUNK_STEPS", len(records[0]["steps"]) * 2)
    project = project_create(slug="taken-back", name="taken-back")
    trajectory_records_import(project=project, records=records[:4])
    # New ones first; then repeats of trajectories the project has, in later chunks,
    # before and after the trajectory rows are first written (every 5 rows here).
    push = [*records[4:8], records[1], *records[8:12], records[2], *records[12:]]

    with CaptureQueriesContext(connection) as queries:
        batch = trajectory_records_import(project=project, records=push)

    assert (batch.created_count, batch.unchanged_count) == (12, 2)
    assert batch.step_count == sum(len(r["steps"]) for r in records[4:])
    assert Trajectory.objects.filter(project=project).count() == 16
    for record in records:
        trajectory = Trajectory.objects.get(project=project, external_id=record["id"])
        steps = list(trajectory.steps.order_by("index"))
        assert [s.content for s in steps] == [s["content"] for s in record["steps"]]
        assert [s.index for s in steps] == list(range(len(record["steps"])))
    assert Step.objects.filter(trajectory__project=project).count() == sum(
        len(r["steps"]) for r in records
    )
    assert_step_keys_hold_and_checks_back_on()
    # The first chunk asked about; the next two at once, before the first five rows
    # were written (which found the first repeat); from then on each chunk before it
    # is written (which found the second).
    assert [len(digests) for digests in probes_in(queries)] == [2, 4, 2, 2, 2, 2]


def test_a_small_import_takes_exactly_the_ids_it_needs(tmp_path: Path) -> None:
    """Ids are taken in blocks after the first chunk; the first is exact, so imports of
    one chunk (an API push) leave no gap between them."""
    records = list(synthetic.rollouts(tasks=2, rollouts_per_task=2, seed=6))
    project = project_create(slug="ids", name="ids")
    for number, pair in enumerate((records[:2], records[2:])):
        trajectory_import(
            project=project,
            source_format="stepscope",
            path=write(tmp_path / f"{number}.jsonl", pair),
        )
    ids = list(
        Trajectory.objects.filter(project=project).order_by("id").values_list("id", flat=True)
    )
    assert ids == list(range(ids[0], ids[0] + 4))


def test_a_push_of_many_chunks_takes_its_ids_in_one_go() -> None:
    """A push knows how many records it has, so it takes that many ids with its first
    chunk: taking more later would end the open step COPY in the middle of the push."""
    records = list(synthetic.rollouts(tasks=5, rollouts_per_task=2, seed=7))
    project = project_create(slug="push-ids", name="push-ids")
    with CaptureQueriesContext(connection) as queries:
        batch = trajectory_records_import(project=project, records=records)
    assert batch.created_count == 10
    taken = [q["sql"] for q in queries.captured_queries if "generate_series" in q["sql"]]
    assert len(taken) == 1, taken
    ids = list(
        Trajectory.objects.filter(project=project).order_by("id").values_list("id", flat=True)
    )
    assert ids == list(range(ids[0], ids[0] + 10))


def test_prefix_hashes_written_are_the_hashing_modules(tmp_path: Path) -> None:
    records = labelled_records(4)
    path = write(tmp_path / "runs.jsonl", records)
    project = project_create(slug="hashes", name="hashes")
    trajectory_import(project=project, source_format="stepscope", path=path)

    from trajectories.formats.stepscope import parse

    for parsed in parse(path):
        assert not isinstance(parsed, RecordError)
        stored = Step.objects.filter(trajectory__external_id=parsed.external_id).order_by("index")
        assert [s.prefix_hash for s in stored] == prefix_hashes(parsed.task, parsed.steps)


def test_without_the_shortcut_the_import_is_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database role that may not skip trigger checks (not a superuser) keeps the
    deferred foreign-key check; the rows written are the same."""
    monkeypatch.setattr(import_writer, "can_skip_trigger_checks", lambda: False)
    records = labelled_records(6)
    path = write(tmp_path / "runs.jsonl", records)
    project = project_create(slug="checked", name="checked")

    batch = trajectory_import(project=project, source_format="stepscope", path=path)

    assert batch.created_count == 6
    assert Step.objects.count() == sum(len(r["steps"]) for r in records)
    assert StepLabel.objects.count() == 6


def test_a_role_granted_the_setting_skips_the_checks_too(tmp_path: Path) -> None:
    """Managed PostgreSQL gives no superuser; from version 15 a role granted
    ``SET ON PARAMETER session_replication_role`` takes the shortcut as well, and its
    import writes the same rows with the keys holding. Roles and grants are
    transactional, so the test's rollback removes them."""
    role = "stepscope_import_test"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role} NOLOGIN")
        cursor.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
        cursor.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
        cursor.execute(f"SET ROLE {role}")
    try:
        assert not import_writer.can_skip_trigger_checks()
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")
            cursor.execute(f"GRANT SET ON PARAMETER session_replication_role TO {role}")
            cursor.execute(f"SET ROLE {role}")
        assert import_writer.can_skip_trigger_checks()

        records = labelled_records(6)
        project = project_create(slug="granted", name="granted")
        batch = trajectory_import(
            project=project, source_format="stepscope", path=write(tmp_path / "r.jsonl", records)
        )

        assert batch.created_count == 6
        assert Step.objects.count() == sum(len(r["steps"]) for r in records)
        assert_step_keys_hold_and_checks_back_on()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")


def test_bad_record_in_a_later_chunk_writes_nothing(tmp_path: Path) -> None:
    records = labelled_records(10)
    records[8]["steps"][2]["kind"] = "pondering"
    path = write(tmp_path / "runs.jsonl", records)
    project = project_create(slug="bad", name="bad")

    with pytest.raises(ImportRejected) as rejected:
        trajectory_import(project=project, source_format="stepscope", path=path)

    assert rejected.value.batch.errors == [
        {
            "location": "line 9",
            "field": "steps.2.kind",
            "message": "is 'pondering'; expected one of message, thought, action, tool_call, "
            "tool_result, observation, answer",
        }
    ]
    assert not Trajectory.objects.exists()
    assert not Step.objects.exists()
    assert not StepLabel.objects.exists()


def test_file_error_met_after_several_chunks_fails_the_whole_file(tmp_path: Path) -> None:
    """A JSON array cut off after several chunks were written: the parser's FileError
    (raised in the helper, when there is one) fails the import, and nothing stays."""
    text = (REALDATA / "tau_bench" / "gpt-4o-airline.json").read_text()
    runs = json.loads(text)[:12]
    whole = json.dumps(runs)
    path = tmp_path / "cut.json"
    path.write_text(whole[: len(whole) * 3 // 4])
    project = project_create(slug="cut", name="cut")

    with pytest.raises(ImportRejected) as rejected:
        trajectory_import(project=project, source_format="openai-messages", path=path)

    batch = rejected.value.batch
    assert batch.status == ImportBatch.Status.FAILED
    assert batch.errors[0]["location"] == "file"
    assert "not valid JSON at record" in batch.errors[0]["message"]
    assert batch.processed_count > 3  # several chunks were parsed and written first
    assert not Trajectory.objects.exists()
    assert not Step.objects.exists()


def test_labels_land_on_the_steps_they_name(tmp_path: Path) -> None:
    """Step ids come from the column default, so each label finds its step by
    trajectory and index: every label of a record with many is on the right step."""
    record = next(synthetic.rollouts(tasks=1, seed=3))
    for index, step in enumerate(record["steps"]):
        step["labelable"] = True
        step["labels"] = [{"annotator": f"import:a{index % 2}", "value": index % 3 - 1}]
    path = write(tmp_path / "one.jsonl", [record])
    project = project_create(slug="labels", name="labels")

    trajectory_import(project=project, source_format="stepscope", path=path)

    stored = StepLabel.objects.order_by("step__index").values_list(
        "step__index", "annotator__username", "value"
    )
    assert list(stored) == [
        (index, f"import:a{index % 2}", index % 3 - 1) for index in range(len(record["steps"]))
    ]


def test_keys_written_without_checks_hold(tmp_path: Path) -> None:
    records = labelled_records(6)
    path = write(tmp_path / "runs.json", records)
    project = project_create(slug="keys", name="keys")
    batch = trajectory_import(project=project, source_format="stepscope", path=path)

    assert Trajectory.objects.filter(project=project, import_batch=batch).count() == 6
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM trajectories_trajectory t"
            " LEFT JOIN trajectories_project p ON p.id = t.project_id"
            " LEFT JOIN trajectories_importbatch b ON b.id = t.import_batch_id"
            " WHERE p.id IS NULL OR b.id IS NULL"
        )
        assert cursor.fetchone() == (0,)
