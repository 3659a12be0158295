"""Exports that draw on other apps' results: credits from an attribution run in ``rl``
rows, and Monte Carlo labels (``--labels mc...``) from rollouts' step values."""

from __future__ import annotations

import json
import threading
from io import StringIO
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction
from django.test import Client
from rest_framework.test import APIClient

from exports.models import ExportJob, Selection
from exports.services import (
    ExportCancelled,
    export_job_run,
    export_plan_build,
    export_write,
)
from labeling.models import FinalLabel, LabelSchema, StepLabel
from labeling.services import label_schema_create
from rollouts.models import Policy, StepMC
from scoring import services as scoring
from scoring.models import AttributionRun, StepCredit
from tests.exports.progress_stubs import CancelledProgress
from tests.factories import MembershipFactory, UserFactory
from trajectories import synthetic
from trajectories.models import Membership, Project, Step
from trajectories.services import project_create, trajectory_import


def export(*args: str) -> dict[str, Any]:
    out = StringIO()
    call_command("export", *args, stdout=out)
    return json.loads(out.getvalue().strip().splitlines()[-1])


def rollouts_project(tmp_path: Path, slug: str = "arith") -> Project:
    """Two tasks of three arithmetic rollouts each, four steps a rollout."""
    project = project_create(slug=slug, name=slug)
    path = tmp_path / f"{slug}.jsonl"
    records = synthetic.rollouts(tasks=2, rollouts_per_task=3, steps_per_task=3, seed=3)
    synthetic.write_jsonl(path, records)
    trajectory_import(project=project, source_format="stepscope", path=path)
    return project


@pytest.fixture
def researcher(db: None) -> User:
    return UserFactory.create(username="researcher")


def finished_run(project: Project) -> AttributionRun:
    """A group-relative run through the attribution services, in this process (its
    Celery tasks are enqueued on commit, which a test transaction never reaches)."""
    run = scoring.attribution_run_start(project=project, method="group-relative")
    scoring.attribution_run_plan(run_id=run.pk)
    for chunk_id in run.chunks.values_list("pk", flat=True):
        scoring.attribution_chunk_run(chunk_id=chunk_id)
    run.refresh_from_db()
    assert run.status == AttributionRun.Status.DONE, run.error
    return run


@pytest.mark.django_db
def test_rl_rows_carry_the_chosen_runs_credits(tmp_path: Path) -> None:
    project = rollouts_project(tmp_path)
    run = finished_run(project)
    export(
        "--project",
        "arith",
        "--format",
        "rl",
        "--labels",
        "import:synthetic-truth",
        "--neutral",
        "keep",
        "--credit-run",
        str(run.pk),
        "--out",
        str(tmp_path / "out"),
    )
    rows = pq.read_table(tmp_path / "out" / "rl.parquet").to_pylist()
    expected = {
        (trajectory_id, index): value
        for trajectory_id, index, value in StepCredit.objects.filter(run=run).values_list(
            "step__trajectory_id", "step__index", "value"
        )
    }
    assert len(rows) == Step.objects.filter(trajectory__project=project).count() == 24
    assert {(r["trajectory_id"], r["step_index"]): r["credit"] for r in rows} == expected
    # Group-relative credit differs between a task's successes and failures.
    assert len({r["credit"] for r in rows}) > 1

    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["revisions"]["attribution"] == {
        str(run.pk): {
            "method": "group-relative",
            "parameters": run.parameters,
            "scorer": None,
            "scorer_revision": "",
            "label_source": "",
            "key": run.key,
        }
    }


@pytest.mark.django_db
def test_rl_credit_is_null_without_a_credit_run(tmp_path: Path) -> None:
    rollouts_project(tmp_path)
    export(
        "--project",
        "arith",
        "--format",
        "rl",
        "--labels",
        "import:synthetic-truth",
        "--neutral",
        "keep",
        "--out",
        str(tmp_path),
    )
    rows = pq.read_table(tmp_path / "rl.parquet").to_pylist()
    assert {r["credit"] for r in rows} == {None}
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["revisions"]["attribution"] == {}


@pytest.mark.django_db
def test_a_credit_run_must_be_a_finished_run_of_the_project(tmp_path: Path) -> None:
    project = rollouts_project(tmp_path)
    other = rollouts_project(tmp_path, slug="other")
    foreign = finished_run(other)
    base = [
        "--project",
        "arith",
        "--format",
        "rl",
        "--labels",
        "import:synthetic-truth",
        "--neutral",
        "keep",
        "--out",
        str(tmp_path / "x"),
    ]
    with pytest.raises(CommandError, match=f"no attribution run {foreign.pk} in project 'arith'"):
        call_command("export", *base, "--credit-run", str(foreign.pk))
    queued = scoring.attribution_run_start(project=project, method="group-relative")
    with pytest.raises(CommandError, match=f"attribution run {queued.pk} is queued"):
        call_command("export", *base, "--credit-run", str(queued.pk))
    with pytest.raises(CommandError, match="need an attribution run"):
        call_command("export", *base[:3], "dpo", *base[4:], "--pair-value", "credit")
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


def mc_values(project: Project, policy: Policy, values: dict[int, tuple[int, int]]) -> None:
    """StepMC rows as a rollout job writes them: ``{step index: (k, successes)}`` on the
    first rollout's steps."""
    first = project.trajectories.order_by("id").first()
    assert first is not None
    for step in first.steps.all():
        if step.index in values:
            k, successes = values[step.index]
            StepMC.objects.create(
                step=step,
                policy=policy,
                k=k,
                successes=successes,
                soft=successes / k,
                hard=successes > 0,
            )


@pytest.mark.django_db
def test_mc_labels_export_hard_soft_and_per_policy(tmp_path: Path) -> None:
    project = rollouts_project(tmp_path)
    greedy = Policy.objects.create(project=project, name="greedy", model_ref="tiny")
    sampler = Policy.objects.create(project=project, name="sampler", model_ref="tiny")
    # Step 3 (the answer) has no value: the records end before it.
    mc_values(project, greedy, {0: (4, 4), 1: (4, 1), 2: (4, 0)})
    mc_values(project, sampler, {0: (4, 0), 1: (4, 4), 2: (4, 4)})
    first_task = project.trajectories.order_by("id").first().task  # type: ignore[union-attr]

    def labels(source: str, *extra: str) -> list[bool]:
        out = tmp_path / source.replace(":", "-")
        summary = export(
            "--project",
            "arith",
            "--format",
            "trl-stepwise",
            "--labels",
            source,
            "--neutral",
            "drop",
            "--out",
            str(out),
            *extra,
        )
        assert summary["trajectories"] == 6
        lines = (out / "trl-stepwise.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        # Only the first rollout has values; the other five have no labelled step.
        (record,) = [r for r in records if r["prompt"] == first_task]
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["label_source"] == f"mc:{source.removeprefix('mc').lstrip(':')}"
        assert manifest["counts"]["notes"]["skipped_no_labelled_step"] == 5
        return list(record["labels"])

    # Hard: good when any continuation succeeded; the records stop at the first error.
    assert labels("mc:greedy") == [True, True, False]
    assert labels("mc:greedy:hard", "--no-stop-at-first-error") == [True, True, False]
    # Soft: the success fraction against --threshold.
    assert labels("mc:greedy:soft", "--threshold", "0.2") == [True, True, False]
    assert labels("mc:greedy:soft", "--threshold", "0.5") == [True, False]
    assert labels("mc:sampler") == [False]
    assert labels("mc:sampler:soft", "--no-stop-at-first-error") == [False, True, True]
    # Without a policy: each step's newest value, whichever policy gave it (the sampler's).
    assert labels("mc", "--no-stop-at-first-error") == [False, True, True]
    with pytest.raises(CommandError, match="no policy named 'nobody'"):
        labels("mc:nobody")


@pytest.mark.django_db
def test_the_api_takes_a_credit_run_and_the_job_keeps_it(
    settings: Any, tmp_path: Path, researcher: User
) -> None:
    settings.MEDIA_ROOT = tmp_path
    project = rollouts_project(tmp_path)
    MembershipFactory.create(user=researcher, project=project, role=Membership.Role.RESEARCHER)
    run = finished_run(project)
    api = APIClient()
    api.force_authenticate(researcher)
    body = {
        "project": "arith",
        "format": "rl",
        "labels": "import:synthetic-truth",
        "neutral": "keep",
        "credit_run": run.pk,
    }
    response = api.post("/api/v1/exports/", body, format="json")
    assert response.status_code == 202, response.content
    # The worker's task body, in this process (the test transaction never commits).
    job = export_job_run(job_id=response.json()["id"])
    assert job.status == ExportJob.Status.DONE, job.error
    assert job.manifest is not None
    assert str(run.pk) in job.manifest["revisions"]["attribution"]
    rows = pq.read_table(Path(job.out_dir) / "rl.parquet").to_pylist()
    assert None not in {r["credit"] for r in rows}
    refused = api.post("/api/v1/exports/", {**body, "credit_run": run.pk + 1000}, format="json")
    assert refused.status_code == 400
    assert f"no attribution run {run.pk + 1000}" in refused.content.decode()


@pytest.mark.django_db(transaction=True)
def test_reading_ahead_on_a_second_connection_gives_the_same_bytes(tmp_path: Path) -> None:
    """Outside a caller's transaction a second connection reads ahead in the export's
    snapshot; the files are the same as when one connection reads everything, and a
    cancelled export stops the reading thread."""
    project = rollouts_project(tmp_path)
    run = finished_run(project)
    # (As JSON Lines: rl's Parquet is read in one COPY instead, test_exports_rl.py.)
    plan = export_plan_build(
        project=project,
        format="rl",
        labels="import:synthetic-truth",
        neutral="keep",
        credit_run=run.pk,
        container="jsonl",
    )
    ahead = export_write(plan, out_dir=tmp_path / "ahead")
    with transaction.atomic():
        inline = export_write(plan, out_dir=tmp_path / "inline")
    assert ahead["files"] == inline["files"]
    assert ahead["files"]["rl.jsonl"]["rows"] == 24

    threads = threading.active_count()
    with pytest.raises(ExportCancelled):
        export_write(
            plan,
            out_dir=tmp_path / "cancelled",
            progress=CancelledProgress(),
        )
    assert threading.active_count() == threads
    assert not list((tmp_path / "cancelled").iterdir())


@pytest.mark.django_db
def test_dpo_pairs_come_from_sibling_rollouts_read_from_the_database(tmp_path: Path) -> None:
    """Rollouts of one task share their steps until one slips; the slip (-1) and the
    correct step other rollouts took there (+1) are siblings after the same prefix."""
    rollouts_project(tmp_path)
    out = tmp_path / "o"
    summary = export(
        "--project",
        "arith",
        "--format",
        "dpo",
        "--labels",
        "import:synthetic-truth",
        "--neutral",
        "drop",
        "--out",
        str(out),
    )
    pairs = [json.loads(line) for line in (out / "dpo.jsonl").read_text().splitlines()]
    assert summary["rows"] == len(pairs) > 0
    for pair in pairs:
        # Synthetic steps read "Step n: a op b = c"; a slip gets c wrong.
        chosen, rejected = pair["chosen"], pair["rejected"]
        assert chosen.split("=")[0] == rejected.split("=")[0]
        assert chosen != rejected


@pytest.mark.django_db
def test_a_dpo_export_without_sibling_pairs_says_so(
    settings: Any, tmp_path: Path, researcher: User
) -> None:
    """One rollout per task: no branch point, so no pair. The files are empty, and the
    manifest and the export's page say why instead of nothing."""
    settings.MEDIA_ROOT = tmp_path
    project = project_create(slug="lone", name="lone")
    path = tmp_path / "lone.jsonl"
    synthetic.write_jsonl(
        path, synthetic.rollouts(tasks=3, rollouts_per_task=1, steps_per_task=3, seed=3)
    )
    trajectory_import(project=project, source_format="stepscope", path=path)
    MembershipFactory.create(user=researcher, project=project, role=Membership.Role.RESEARCHER)
    api = APIClient()
    api.force_authenticate(researcher)
    body = {"project": "lone", "format": "dpo", "labels": "import:synthetic-truth"}
    response = api.post("/api/v1/exports/", {**body, "neutral": "drop"}, format="json")
    assert response.status_code == 202, response.content
    job = export_job_run(job_id=response.json()["id"])
    assert job.status == ExportJob.Status.DONE, job.error
    assert job.row_count == 0
    manifest = json.loads((Path(job.out_dir) / "manifest.json").read_text())
    [warning] = manifest["warnings"]
    assert warning.startswith("No sibling pairs")
    assert "3 tasks, 3 trajectories" in warning and "The files are empty" in warning

    client = Client()
    client.force_login(researcher)
    page = client.get(f"/exports/{job.pk}/").content.decode()
    assert 'id="export-warnings"' in page and "No sibling pairs" in page

    # With siblings there is nothing to warn about.
    rollouts_project(tmp_path)
    MembershipFactory.create(
        user=researcher, project=Project.objects.get(slug="arith"), role="researcher"
    )
    response = api.post(
        "/api/v1/exports/", {**body, "project": "arith", "neutral": "drop"}, format="json"
    )
    job = export_job_run(job_id=response.json()["id"])
    assert job.row_count > 0
    assert job.manifest is not None and job.manifest["warnings"] == []


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", ["trl-stepwise", "dpo", "kto", "sft", "rl", "processbench"])
def test_the_manifest_names_the_annotators_a_resolved_source_drew_on(
    tmp_path: Path, fmt: str
) -> None:
    """``human:majority`` resolves many people's labels into one per step: the manifest
    lists whose submitted labels went into the exported steps, not nobody."""
    project = rollouts_project(tmp_path)
    schema = LabelSchema.objects.get(project=project, is_active=True)
    people = {name: UserFactory.create(username=name) for name in ("alice", "bob", "carol", "dan")}
    first = project.trajectories.order_by("id")[0]
    second = project.trajectories.exclude(task_key=first.task_key).order_by("id")[0]
    for step in first.steps.filter(labelable=True):
        for name in ("alice", "bob"):
            StepLabel.objects.create(
                step=step, annotator=people[name], schema=schema, value=1, status="submitted"
            )
    adjudicated = first.steps.filter(labelable=True).first()
    assert adjudicated is not None
    FinalLabel.objects.create(step=adjudicated, schema=schema, value=-1, adjudicator=people["dan"])
    # A draft counts for nobody; a label outside the selection is not in the export.
    StepLabel.objects.create(
        step=second.steps.filter(labelable=True)[0],
        annotator=people["carol"],
        schema=schema,
        value=1,
        status="draft",
    )
    Selection.objects.create(project=project, name="first", definition={"task_key": first.task_key})

    def annotators(labels: str, selection: str = "") -> list[str]:
        out = tmp_path / f"{fmt}-{labels}-{selection}".replace(":", "-")
        args = ["--project", "arith", "--format", fmt, "--labels", labels, "--neutral", "drop"]
        export(*args, *(["--selection", selection] if selection else []), "--out", str(out))
        manifest = json.loads((out / "manifest.json").read_text())
        return list(manifest["annotators"])

    assert annotators("human:majority") == ["alice", "bob"]
    assert annotators("human:bob") == ["bob"]
    assert annotators("human:adjudicated") == ["dan"]
    assert annotators("import:synthetic-truth") == ["import:synthetic-truth"]
    # carol's draft, now submitted, lies outside a selection of the first task.
    StepLabel.objects.filter(annotator=people["carol"]).update(status="submitted")
    assert annotators("human:majority") == ["alice", "bob", "carol"]
    assert annotators("human:majority", "first") == ["alice", "bob"]


@pytest.mark.django_db
def test_a_project_with_several_schemas_offers_each_source_per_schema(
    tmp_path: Path, researcher: User
) -> None:
    """People's labels are read one schema at a time where a project has several, so the
    export page offers each such source per schema (it answered 500 while it offered the
    unnamed ones), counted under that schema, and opens on the first schema's majority."""
    project = rollouts_project(tmp_path)
    label_schema_create(
        project=project,
        name="severity",
        kind="ordinal",
        values=[
            {"value": 1, "name": "minor", "key": "7"},
            {"value": 2, "name": "major", "key": "8"},
        ],
    )
    MembershipFactory.create(user=researcher, project=project, role=Membership.Role.RESEARCHER)
    client = Client()
    client.force_login(researcher)
    response = client.get(f"/p/{project.slug}/exports/")
    assert response.status_code == 200
    choices = dict(response.context["form"].fields["labels"].choices)
    truth = "import:synthetic-truth"
    assert {f"human:majority/{name}" for name in ("severity", "step quality")} <= set(choices)
    assert "human:majority" not in choices and truth not in choices
    labelled = StepLabel.objects.filter(annotator__username=truth).count()
    assert labelled
    assert choices[f"{truth}/step quality"].endswith(f"· {labelled:,} steps")
    assert choices[f"{truth}/severity"].endswith("· 0 steps")
    assert response.context["form"]["labels"].initial == f"{truth}/step quality"
