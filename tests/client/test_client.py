"""The client against a real Stepscope: pytest-django's live server (a threaded HTTP
server on the test database) and, where a job must run, the suite's Celery worker."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stepscope_client import Client, Job, ProgressBar, StepscopeError
from stepscope_client.records import trajectory_record

from labeling.models import SpanLabel, StepLabel
from labeling.services import span_schema_save
from scoring.models import ScoringRun, StepScore
from scoring.services import judges
from tests.conftest import REALDATA
from trajectories.formats import parser_for
from trajectories.formats.base import ParsedDecisive, ParsedTrajectory
from trajectories.formats.stepscope import to_record
from trajectories.models import ImportBatch, Project, Trajectory

pytestmark = pytest.mark.django_db(transaction=True)

PROCESSBENCH = REALDATA / "processbench" / "gsm8k.json"


def records(count: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"rollout-{n}",
            "task": f"What is {n} + 2?",
            "steps": [{"content": "Add the two numbers."}, {"content": f"{n + 2}"}],
        }
        for n in range(count)
    ]


@pytest.fixture
def stepscope(live_server: Any, token: str) -> Iterator[Client]:
    with Client(live_server.url, token) as stepscope:
        yield stepscope


def test_push_is_chunked_and_a_retried_push_changes_nothing(
    stepscope: Client, project: Project
) -> None:
    first = stepscope.push_trajectories(project.slug, records(5), chunk_size=2)
    assert (first.created, first.unchanged, first.steps) == (5, 0, 10)
    assert len(first.imports) == 3 and all(job.status == "done" for job in first.imports)

    again = stepscope.push_trajectories(project.slug, records(5), chunk_size=2)
    assert (again.created, again.unchanged) == (0, 5)
    assert Trajectory.objects.filter(project=project).count() == 5


def test_parsed_trajectories_are_pushed_as_stepscope_writes_them(
    stepscope: Client, project: Project
) -> None:
    parsed = [
        r for r in parser_for("processbench")(PROCESSBENCH) if isinstance(r, ParsedTrajectory)
    ]
    assert len(parsed) == 400
    # The client's copy of the format must write what Stepscope's own writer writes.
    assert [trajectory_record(t) for t in parsed] == [to_record(t) for t in parsed]
    decided = dataclasses.replace(parsed[0], decisive=ParsedDecisive("assistant", 1, "why"))
    assert trajectory_record(decided) == to_record(decided)
    assert trajectory_record(decided)["decisive"] == {
        "agent": "assistant",
        "step": 1,
        "reason": "why",
    }

    pushed = stepscope.push_trajectories(project.slug, parsed[:50], chunk_size=20)

    assert (pushed.created, len(pushed.imports)) == (50, 3)
    again = stepscope.push_trajectories(project.slug, [to_record(t) for t in parsed[:50]])
    assert again.unchanged == 50
    first_errors = StepLabel.objects.filter(annotator__username="import:processbench")
    assert first_errors.exists()


def test_a_refused_push_names_the_record_and_writes_nothing(
    stepscope: Client, project: Project
) -> None:
    bad = records(3)
    bad[1]["steps"] = 7

    with pytest.raises(StepscopeError) as refused:
        stepscope.push_trajectories(project.slug, bad)

    assert refused.value.status == 400
    assert "field 'steps': expected list, got int" in str(refused.value)
    assert refused.value.errors["rejected_count"] == 1
    assert not Trajectory.objects.exists()

    with pytest.raises(StepscopeError) as later:
        stepscope.push_trajectories(project.slug, [*records(4), *bad], chunk_size=4)
    # Named by its index in the whole push: the second chunk's record 1 is record 5.
    assert "record 5, field 'steps'" in str(later.value)
    assert later.value.errors["errors"][0]["location"] == "record 5"
    # Each request is all or nothing: the chunk before the refused one stays.
    assert Trajectory.objects.count() == 4


def test_labels_are_pushed_in_one_request_and_submitted(
    stepscope: Client, project: Project
) -> None:
    stepscope.push_trajectories(project.slug, records(1))
    trajectory = stepscope.trajectory_id(project.slug, "rollout-0")
    labels = [{"trajectory": trajectory, "index": i, "value": 1} for i in range(2)]

    written = stepscope.push_labels(labels, submit=True, outcome="correct")

    assert written["created"] == 2
    assert [t["status"] for t in written["submitted"]] == ["submitted"]
    assert StepLabel.objects.filter(step__trajectory_id=trajectory).count() == 2


def test_rubric_and_episode_verdict_through_the_client(stepscope: Client, project: Project) -> None:
    stepscope.push_trajectories(project.slug, records(1))
    trajectory = stepscope.trajectory_id(project.slug, "rollout-0")
    rubric = stepscope.save_rubric(
        project.slug, [{"text": "Counts right", "weight": 3}, {"text": "Explains"}]
    )
    assert [r["id"] for r in stepscope.rubrics(project.slug)] == [rubric["id"]]

    result = stepscope.mark_rubric(
        trajectory,
        rubric["id"],
        [{"criterion": 0, "mark": "met", "evidence": [1]}, {"criterion": 1, "mark": "not_met"}],
    )
    assert result["score"] == 0.75
    assert stepscope.rubric_results(trajectory)[0]["criteria"][0]["evidence"] == [1]
    stepscope.episode_verdict(trajectory, outcome="success", critique="fine")
    assert [v["outcome"] for v in stepscope.episode_verdicts(trajectory)] == ["success"]
    with pytest.raises(StepscopeError, match="not a valid choice"):
        stepscope.mark_rubric(trajectory, rubric["id"], [{"criterion": 0, "mark": "yes"}])
    # Nothing submitted yet: no trajectory is marked by both; a bad source is named.
    me = stepscope.rubric_results(trajectory)[0]["annotator"]
    aligned = stepscope.rubric_alignment(project.slug, f"rubric:human:{me}", "human:majority")
    assert aligned["trajectories"] == 0 and [c["pairs"] for c in aligned["criteria"]] == [0, 0]
    with pytest.raises(StepscopeError, match="unknown rubric source"):
        stepscope.rubric_alignment(project.slug, "model:x", "human:majority")


def test_trajectory_id_refuses_to_pick_one_of_two_with_the_same_id(
    stepscope: Client, project: Project
) -> None:
    stepscope.push_trajectories(project.slug, records(1))
    changed = records(1)
    changed[0]["steps"][1]["content"] = "3, I think"
    stepscope.push_trajectories(project.slug, changed)
    ids = sorted(Trajectory.objects.filter(external_id="rollout-0").values_list("pk", flat=True))
    assert len(ids) == 2

    with pytest.raises(StepscopeError) as ambiguous:
        stepscope.trajectory_id(project.slug, "rollout-0")

    assert ambiguous.value.status == 409
    assert f"ids {ids[0]}, {ids[1]}" in str(ambiguous.value)


def test_a_refused_label_batch_names_the_item_and_field(
    stepscope: Client, project: Project
) -> None:
    stepscope.push_trajectories(project.slug, records(1))
    trajectory = stepscope.trajectory_id(project.slug, "rollout-0")
    labels = [
        {"trajectory": trajectory, "index": 0, "value": 1},
        {"trajectory": trajectory, "index": 1, "value": 9},
    ]

    with pytest.raises(StepscopeError) as refused:
        stepscope.push_labels(labels)

    assert refused.value.status == 400
    assert "9 is not a value" in refused.value.errors["labels"]["1"]["value"]
    assert not StepLabel.objects.exists()


def test_scores_are_pushed_in_chunks_and_refusals_name_the_whole_list_index(
    stepscope: Client, project: Project
) -> None:
    stepscope.push_trajectories(project.slug, records(2))
    scores = [
        {"trajectory": f"rollout-{n}", "step": i, "value": 0.25 * (i + 1)}
        for n in range(2)
        for i in range(2)
    ]

    stored = stepscope.push_scores(project.slug, "my-prm", scores, chunk_size=3)
    assert stored.stored == 4 and len(stored.runs) == 2 and not stored.rejected
    assert StepScore.objects.filter(run__scorer__name="my-prm").count() == 4

    bad = [*scores[:3], {"trajectory": "rollout-1", "step": 7, "value": 0.5}]
    with pytest.raises(StepscopeError) as refused:
        stepscope.push_scores(project.slug, "my-prm", bad, chunk_size=2)
    assert refused.value.status == 400
    assert "no step 7" in refused.value.errors["scores"]["3"]

    skipped = stepscope.push_scores(project.slug, "other", bad, chunk_size=2, skip_invalid=True)
    assert skipped.stored == 3 and list(skipped.rejected) == [3]


def test_a_file_is_imported_on_a_worker_and_exported_to_a_folder(
    stepscope: Client, project: Project, celery_worker: object, tmp_path: Path
) -> None:
    job = stepscope.upload_file(project.slug, PROCESSBENCH, "processbench")
    assert isinstance(job, Job) and job.kind == "imports"
    seen: list[Job] = []

    imported = stepscope.wait(job, progress=seen.append, poll=0.05, timeout=120)

    assert (imported.data["created_count"], imported.data["step_count"]) == (400, 2082)
    assert seen[-1].status == "done" and seen[-1].finished

    bar = io.StringIO()
    export = stepscope.start_export(project.slug, "rl", "import:processbench")
    finished = stepscope.wait(export, progress=ProgressBar(bar), poll=0.05, timeout=120)
    assert bar.getvalue().endswith("\n") and f"exports {export.id}: done" in bar.getvalue()

    paths = stepscope.download_export(finished, tmp_path / "out")
    assert sorted(p.name for p in paths) == ["manifest.json", "rl-prompts.parquet", "rl.parquet"]
    for described in finished.data["files"]:
        body = (tmp_path / "out" / described["name"]).read_bytes()
        assert hashlib.sha256(body).hexdigest() == described["sha256"]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest == finished.data["manifest"]


def test_a_failed_import_raises_with_its_errors(
    stepscope: Client, project: Project, celery_worker: object, tmp_path: Path
) -> None:
    broken = json.loads(PROCESSBENCH.read_text())[:3]
    broken[1]["steps"] = 7
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))

    job = stepscope.upload_file(project.slug, path, "processbench")
    with pytest.raises(StepscopeError) as failed:
        stepscope.wait(job, poll=0.05, timeout=120)

    assert failed.value.status is None and failed.value.errors["status"] == "failed"
    assert "record 1" in str(failed.value)
    assert stepscope.wait(job, poll=0.05, check=False).status == "failed"
    assert not Trajectory.objects.exists()


def test_refusals_carry_the_status_and_the_reason(
    stepscope: Client, live_server: Any, project: Project
) -> None:
    with pytest.raises(StepscopeError) as unknown:
        stepscope.push_trajectories("no-such-project", records(1))
    assert unknown.value.status == 404

    with (
        Client(live_server.url, "ssk_not-a-token") as stranger,
        pytest.raises(StepscopeError) as refused,
    ):
        stranger.push_trajectories(project.slug, records(1))
    assert refused.value.status == 401
    assert "never issued" in str(refused.value)


def test_a_queued_import_is_cancelled_and_wait_reports_how_it_ended(
    stepscope: Client, project: Project
) -> None:
    # A queued import no worker will take (no task was sent), so it stays queued.
    batch = ImportBatch.objects.create(
        project=project, file_name="later.jsonl", source_format="stepscope", status="queued"
    )
    job = stepscope.job("imports", batch.pk)
    assert (job.status, job.finished) == ("queued", False)
    with pytest.raises(TimeoutError):
        stepscope.wait(job, poll=0.05, timeout=0.2)

    cancelled = stepscope.cancel(job)

    assert cancelled.status == "cancelled"
    assert stepscope.wait(job, poll=0.05, check=False).status == "cancelled"
    with pytest.raises(StepscopeError, match="cancelled"):
        stepscope.wait(job, poll=0.05)


def test_a_judge_run_is_started_with_what_an_over_long_prompt_does(
    stepscope: Client, project: Project
) -> None:
    stepscope.push_trajectories(project.slug, records(1))
    parameters = {"backend": "remote", "base_url": "http://127.0.0.1:9/v1", "max_tokens": 16}
    judges.judge_create(name="judge", model_ref="m", project=project, parameters=parameters)

    failing = stepscope.start_scoring(project.slug, "judge", on_too_long="fail")
    skipping = stepscope.start_scoring(project.slug, "judge")

    assert ScoringRun.objects.get(pk=failing.id).parameters == {"on_too_long": "fail"}
    assert skipping.data["parameters"] == {"on_too_long": "skip"}
    with pytest.raises(StepscopeError) as refused:
        stepscope.start_scoring(project.slug, "judge", on_too_long="truncate")
    assert refused.value.status == 400 and "on_too_long" in refused.value.errors


def test_spans_through_the_client(stepscope: Client, project: Project) -> None:
    span_schema_save(project=project, name="triage")
    stepscope.push_trajectories(project.slug, records(1))
    trajectory = stepscope.trajectory_id(project.slug, "rollout-0")

    span = stepscope.add_span(trajectory, "triage", 0, 1, "regression")
    assert (span["start"], span["end"], span["value"], span["schema_name"]) == (
        0,
        1,
        "regression",
        "triage",
    )
    changed = stepscope.add_span(trajectory, span["schema"], 0, 1, "decisive progress")
    assert changed["id"] == span["id"]
    listed = stepscope.spans(trajectory)
    assert [(s["id"], s["value"]) for s in listed["spans"]] == [(span["id"], "decisive progress")]
    with pytest.raises(StepscopeError) as refused:
        stepscope.add_span(trajectory, "triage", 1, 5, "regression")
    assert refused.value.status == 400
    assert "Span end 5 is not a step of this trajectory" in str(refused.value)

    stepscope.delete_span(span["id"])
    assert stepscope.spans(trajectory)["spans"] == []
    assert not SpanLabel.objects.exists()
    with pytest.raises(StepscopeError) as gone:
        stepscope.delete_span(span["id"])
    assert gone.value.status == 404


def test_final_spans_through_the_client(stepscope: Client, project: Project) -> None:
    span_schema_save(project=project, name="triage")
    stepscope.push_trajectories(project.slug, records(1))
    trajectory = stepscope.trajectory_id(project.slug, "rollout-0")
    span = stepscope.add_span(trajectory, "triage", 0, 1, "regression")

    picked = stepscope.set_final_span(trajectory, pick=span["id"])
    assert (picked["start"], picked["end"], picked["value"]) == (0, 1, "regression")
    value = "useful exploration"
    own = stepscope.set_final_span(trajectory, schema="triage", start=1, end=1, value=value)
    assert own["adjudicator"] == picked["adjudicator"] and own["schema_name"] == "triage"
    assert [(f["start"], f["end"], f["value"]) for f in stepscope.final_spans(trajectory)] == [
        (0, 1, "regression"),
        (1, 1, value),
    ]
    stepscope.delete_final_span(picked["id"])
    assert [f["id"] for f in stepscope.final_spans(trajectory)] == [own["id"]]
    with pytest.raises(StepscopeError) as refused:
        stepscope.set_final_span(trajectory, schema="triage", start=1, end=0, value=value)
    assert refused.value.status == 400 and "after its end" in str(refused.value)
