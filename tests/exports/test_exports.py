"""Exports end to end: real files in, training records out, reproducibly."""

from __future__ import annotations

import hashlib
import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from exports.models import ExportJob, Selection
from labeling.models import StepLabel
from tests.conftest import REALDATA
from tests.factories import MembershipFactory, UserFactory
from tests.waiting import wait_until
from trajectories.models import Membership, Project, Step, Trajectory
from trajectories.services import project_create, trajectory_import

PROCESSBENCH = REALDATA / "processbench" / "gsm8k.json"
TAU_BENCH = REALDATA / "tau_bench" / "gpt-4o-airline.json"


def export(*args: str) -> dict[str, Any]:
    out = StringIO()
    call_command("export", *args, stdout=out)
    return json.loads(out.getvalue().strip().splitlines()[-1])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(project: Project) -> list[Any]:
    """Everything a lossless round trip must keep, independent of database ids (three
    queries, whatever the number of trajectories)."""
    steps: dict[int, list[Any]] = {}
    for row in (
        Step.objects.filter(trajectory__project=project)
        .order_by("trajectory_id", "index")
        .values_list(
            "trajectory_id",
            "index",
            "kind",
            "role",
            "agent",
            "content",
            "tool_name",
            "tool_args",
            "labelable",
            "policy_version",
            "training_step",
            "logprob_sum",
            "logprob_mean",
            "logprob_min",
            "advantage",
            "returns",
            "token_logprobs",
        )
    ):
        steps.setdefault(row[0], []).append(row[1:])
    labels: dict[int, list[Any]] = {}
    for trajectory_id, index, username, value in StepLabel.objects.filter(
        step__trajectory__project=project
    ).values_list("step__trajectory_id", "step__index", "annotator__username", "value"):
        labels.setdefault(trajectory_id, []).append((index, username, value))
    return sorted(
        (
            t.external_id,
            t.task,
            t.task_key,
            t.outcome_reward,
            t.success,
            t.metadata,
            t.policy_version,
            t.training_step,
            steps.get(t.pk, []),
            sorted(labels.get(t.pk, [])),
        )
        for t in Trajectory.objects.filter(project=project)
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "fmt"), [(PROCESSBENCH, "processbench"), (TAU_BENCH, "openai-messages")]
)
def test_stepscope_export_round_trips_the_real_files(tmp_path: Path, path: Path, fmt: str) -> None:
    source = project_create(slug="source", name="source")
    trajectory_import(project=source, source_format=fmt, path=path)
    summary = export(
        "--project",
        "source",
        "--format",
        "stepscope",
        "--labels",
        f"import:{fmt}",
        "--neutral",
        "keep",
        "--out",
        str(tmp_path / "out"),
    )
    assert summary["trajectories"] == Trajectory.objects.filter(project=source).count()

    copy = project_create(slug="copy", name="copy")
    batch = trajectory_import(
        project=copy, source_format="stepscope", path=tmp_path / "out" / "stepscope.jsonl"
    )
    assert batch.created_count == summary["trajectories"]
    assert snapshot(copy) == snapshot(source)


def full_record(
    external_id: str, first_error_index: int | None, decisive: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A Stepscope record with every field written out, as the export writes it."""
    return {
        "id": external_id,
        "task": f"Count the r's ({external_id}).",
        "task_key": "strawberry",
        "ground_truth": "3",
        "model": "gpt-4o",
        "outcome": {"reward": 0.5, "success": False},
        "first_error_index": first_error_index,
        "decisive": decisive,
        "metadata": {"seed": 7, "nested": {"list": [1, None, "x"]}},
        # An RL rollout's facts on one record; the others have none.
        "training": (
            {"policy_version": "global_step_40", "training_step": 40}
            if external_id == "found"
            else None
        ),
        "steps": [
            {
                "kind": "message",
                "role": "user",
                "content": "How many r's are in strawberry?",
                "labelable": False,
                "agent": "",
                "tool_name": "",
                "tool_args": None,
                "metadata": {},
                "training": None,
                "labels": [],
            },
            {
                "kind": "tool_call",
                "role": "assistant",
                "content": "Let me count with code.",
                "labelable": True,
                "agent": "solver",
                "tool_name": "python",
                "tool_args": {"code": "'strawberry'.count('r')"},
                "metadata": {"latency_ms": 812},
                "training": {
                    "policy_version": "global_step_40",
                    "training_step": 40,
                    "logprob_sum": -3.5,
                    "logprob_mean": -0.875,
                    "logprob_min": -2.0,
                    "advantage": -0.5,
                    "returns": 0.25,
                    "token_logprobs": [-0.5, -0.5, -0.5, -2.0],
                },
                "labels": [
                    {"annotator": "alice", "value": 1},
                    {"annotator": "bob", "value": 0},
                    {"annotator": "stepscope", "value": 1},
                ],
            },
            {
                "kind": "answer",
                "role": "assistant",
                "content": "Il y a 2 « r ».",
                "labelable": True,
                "agent": "solver",
                "tool_name": "",
                "tool_args": None,
                "metadata": {},
                "training": {"advantage": 1.5},
                "labels": [{"annotator": "alice", "value": -1}],
            },
        ],
    }


@pytest.mark.django_db
def test_stepscope_file_round_trips_every_field(tmp_path: Path) -> None:
    decisive = {"agent": "solver", "step": 2, "reason": "miscounts the r's"}
    originals = [
        full_record("found", 2, decisive),
        full_record("clean", -1),
        full_record("unjudged", None),
        # A decisive failure without a first error still makes the import's verdict.
        full_record("decided", None, {"agent": "", "step": 1, "reason": ""}),
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in originals))
    project = project_create(slug="own", name="own")
    trajectory_import(project=project, source_format="stepscope", path=source)
    assert set(StepLabel.objects.values_list("annotator__username", flat=True)) == {
        "import:alice",
        "import:bob",
        "import:stepscope",
    }

    def exported(slug: str, out: str) -> list[dict[str, Any]]:
        args = ["--project", slug, "--format", "stepscope", "--labels", "import:stepscope"]
        export(*args, "--neutral", "keep", "--out", str(tmp_path / out))
        text = (tmp_path / out / "stepscope.jsonl").read_text()
        return [json.loads(line) for line in text.splitlines()]

    first = exported("own", "first")
    assert sorted(first, key=lambda r: r["id"]) == sorted(originals, key=lambda r: r["id"])

    # Import -> export -> import -> export is stable: the same users, the same records.
    copy = project_create(slug="copy", name="copy")
    trajectory_import(
        project=copy, source_format="stepscope", path=tmp_path / "first" / "stepscope.jsonl"
    )
    assert exported("copy", "second") == first
    assert snapshot(copy) == snapshot(project)


@pytest.mark.django_db
def test_exports_are_deterministic_and_splits_never_share_a_task(tmp_path: Path) -> None:
    project = project_create(slug="pb", name="pb")
    trajectory_import(project=project, source_format="processbench", path=PROCESSBENCH)
    args = [
        "--project",
        "pb",
        "--format",
        "trl-stepwise",
        "--labels",
        "import:processbench",
        "--neutral",
        "drop",
        "--split",
        "train=0.8,test=0.2",
        "--seed",
        "7",
    ]
    first = export(*args, "--out", str(tmp_path / "a"))
    second = export(*args, "--out", str(tmp_path / "b"))
    assert first["files"] == second["files"]
    assert sha256(tmp_path / "a" / "manifest.json") == sha256(tmp_path / "b" / "manifest.json")

    prompts = {}
    for split in ("train", "test"):
        lines = (tmp_path / "a" / f"trl-stepwise-{split}.jsonl").read_text().splitlines()
        prompts[split] = {json.loads(line)["prompt"] for line in lines}
        assert lines
    # ProcessBench task keys group identical problems; the prompt is the problem.
    assert not prompts["train"] & prompts["test"]

    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["label_source"] == "import:processbench"
    assert manifest["neutral"] == "drop"
    assert set(manifest["files"]) == {"trl-stepwise-train.jsonl", "trl-stepwise-test.jsonl"}
    for name, info in manifest["files"].items():
        assert info["sha256"] == sha256(tmp_path / "a" / name)


@pytest.mark.django_db
def test_trl_labels_follow_the_first_error(tmp_path: Path) -> None:
    project = project_create(slug="pb", name="pb")
    trajectory_import(project=project, source_format="processbench", path=PROCESSBENCH)
    export(
        "--project",
        "pb",
        "--format",
        "trl-stepwise",
        "--labels",
        "import:processbench",
        "--neutral",
        "drop",
        "--out",
        str(tmp_path),
    )
    records = {
        json.loads(line)["prompt"]: json.loads(line)
        for line in (tmp_path / "trl-stepwise.jsonl").read_text().splitlines()
    }
    raw = json.loads(PROCESSBENCH.read_text())
    erroneous = next(r for r in raw if r["label"] > 0)
    record = records[erroneous["problem"]]
    # Steps up to and including the first error: good, ..., good, bad.
    assert record["labels"] == [True] * erroneous["label"] + [False]
    assert record["completions"] == erroneous["steps"][: erroneous["label"] + 1]


@pytest.mark.django_db
def test_saved_selection_narrows_the_export(tmp_path: Path) -> None:
    project = project_create(slug="pb", name="pb")
    trajectory_import(project=project, source_format="processbench", path=PROCESSBENCH)
    Selection.objects.create(project=project, name="failures", definition={"outcome": "failure"})
    summary = export(
        "--project",
        "pb",
        "--format",
        "kto",
        "--labels",
        "import:processbench",
        "--neutral",
        "drop",
        "--selection",
        "failures",
        "--out",
        str(tmp_path),
    )
    assert (
        summary["trajectories"] == Trajectory.objects.filter(project=project, success=False).count()
    )
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["selection"] == {"name": "failures", "definition": {"outcome": "failure"}}


@pytest.mark.django_db
def test_bad_parameters_are_clear_errors(tmp_path: Path) -> None:
    project_create(slug="pb", name="pb")
    base = ["--project", "pb", "--format", "kto", "--out", str(tmp_path / "x")]
    with pytest.raises(CommandError, match="unknown label source"):
        call_command("export", *base, "--labels", "people", "--neutral", "drop")
    with pytest.raises(CommandError, match="no selection"):
        call_command(
            "export",
            *base,
            "--labels",
            "human:majority",
            "--neutral",
            "drop",
            "--selection",
            "nope",
        )
    with pytest.raises(CommandError, match="no scorer"):
        call_command("export", *base, "--labels", "model:nope", "--neutral", "drop")
    with pytest.raises(CommandError, match="split"):
        call_command(
            "export", *base, "--labels", "human:majority", "--neutral", "drop", "--split", "train=2"
        )
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


@pytest.fixture
def researcher(project: Project) -> User:
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    return user


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_export_job_runs_on_a_worker_and_downloads_for_members_only(
    settings: Any,
    tmp_path: Path,
    project: Project,
    researcher: User,
    outsider: User,
    celery_worker: object,
) -> None:
    settings.MEDIA_ROOT = tmp_path
    trajectory_import(project=project, source_format="processbench", path=PROCESSBENCH)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=researcher).key}")
    response = api.post(
        "/api/v1/exports/",
        {
            "project": project.slug,
            "format": "rl",
            "labels": "import:processbench",
            "neutral": "keep",
        },
        format="json",
    )
    assert response.status_code == 202, response.content
    job_id = response.json()["id"]
    running = ExportJob.objects.filter(pk=job_id, status__in=("queued", "running"))
    ended = wait_until(lambda: not running.exists(), timeout=60)
    assert ended, "the export is still running"
    job = ExportJob.objects.get(pk=job_id)
    assert job.status == "done", job.error
    names = {f["name"] for f in job.files}
    assert names == {"rl.parquet", "rl-prompts.parquet"}
    assert job.row_count == Step.objects.filter(trajectory__project=project).count() + 375

    client = Client()
    client.force_login(researcher)
    download = client.get(f"/exports/{job_id}/files/rl.parquet")
    assert download.status_code == 200
    body = b"".join(download.streaming_content)  # type: ignore[attr-defined]
    assert hashlib.sha256(body).hexdigest() == next(
        f["sha256"] for f in job.files if f["name"] == "rl.parquet"
    )
    assert client.get(f"/exports/{job_id}/files/..%2Fsecret").status_code == 404
    client.force_login(outsider)
    assert client.get(f"/exports/{job_id}/files/rl.parquet").status_code == 404
    assert client.get(f"/exports/{job_id}/").status_code == 404


@pytest.mark.django_db
def test_annotators_cannot_start_exports(client: Client, project: Project, annotator: User) -> None:
    client.force_login(annotator)
    assert client.get(f"/p/{project.slug}/exports/").status_code == 200
    response = client.post(
        f"/p/{project.slug}/exports/",
        {"format": "kto", "labels": "human:majority", "neutral": "drop"},
    )
    assert response.status_code == 403
    assert not ExportJob.objects.exists()


@pytest.mark.django_db
def test_pushing_an_exported_line_back_changes_nothing(
    tmp_path: Path, project: Project, researcher: User
) -> None:
    """A label pushed without an annotator belongs to ``import:stepscope``; the export
    writes it as ``stepscope``, the name that maps back to the same user. Pushing the
    exported line again must find the trajectory it came from, not make a second one."""
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=researcher).key}")
    record = {
        "id": "a-default",
        "task": "1+1?",
        "steps": [{"content": "2", "labels": [{"value": 1}]}],
    }
    first = api.post(
        "/api/v1/imports/", {"project": project.slug, "trajectories": [record]}, format="json"
    )
    assert first.status_code == 201, first.content
    assert first.json()["created_count"] == 1
    export(
        "--project",
        project.slug,
        "--format",
        "stepscope",
        "--labels",
        "import:stepscope",
        "--neutral",
        "keep",
        "--out",
        str(tmp_path),
    )
    (line,) = (tmp_path / "stepscope.jsonl").read_text().splitlines()
    exported = json.loads(line)
    assert exported["steps"][0]["labels"] == [{"annotator": "stepscope", "value": 1}]

    again = api.post(
        "/api/v1/imports/", {"project": project.slug, "trajectories": [exported]}, format="json"
    )
    assert again.status_code == 201, again.content
    assert (again.json()["created_count"], again.json()["unchanged_count"]) == (0, 1)
    assert Trajectory.objects.filter(project=project, external_id="a-default").count() == 1
    # Spelled with the prefix, the same label is the same trajectory too.
    exported["steps"][0]["labels"] = [{"annotator": "import:stepscope", "value": 1}]
    spelled = api.post(
        "/api/v1/imports/", {"project": project.slug, "trajectories": [exported]}, format="json"
    )
    assert (spelled.json()["created_count"], spelled.json()["unchanged_count"]) == (0, 1)
