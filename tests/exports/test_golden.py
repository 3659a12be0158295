"""Every export format's bytes against the bytes it wrote before (``golden.json``): a
change to how an export is resolved, read or planned must leave its files and manifest
the same, byte for byte.

One small project holds what the formats read: arithmetic rollouts with truth labels
(imported), tool-calling runs (tool calls, system and user turns, step metadata), a
person's labels with corrections, a scorer's scores, an attribution run's credits, an
LLM judge's critiques, decisive failures of a model and of a person, and a saved
selection. Database ids are fixed before the rows are made (``rl`` rows carry the
trajectory id, the manifest the attribution run's), so the bytes do not depend on what
ran before in the test database.

After a change that is meant to alter an export's bytes, write the new figures with
``STEPSCOPE_GOLDEN_WRITE=1 .venv/bin/python -m pytest tests/exports/test_golden.py``
and say why in the commit."""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from exports.models import ExportJob
from exports.services import (
    export_plan_build,
    export_plan_of,
    export_start,
    export_write,
    selection_save,
)
from labeling.models import LabelSchema, StepLabel, TrajectoryLabel
from scoring import prm
from scoring import services as scoring
from scoring.models import AttributionRun, JudgePrompt, JudgeReply, Scorer, ScoringRun, StepScore
from scoring.services import VerdictInput, failure_verdicts_write
from tests.conftest import REALDATA
from trajectories import synthetic
from trajectories.models import Project, Step, Trajectory
from trajectories.selection import selection_parse
from trajectories.services import project_create, trajectory_import

GOLDEN = Path(__file__).with_name("golden.json")
TAU_BENCH = REALDATA / "tau_bench" / "gpt-4o-airline.json"
# Ids the fixture's rows start from (well above what other tests use).
FIRST_ID = 7_000_000

# name: the export's parameters (export_plan_build's, less the project). A credit
# run of ``True`` is the fixture's attribution run.
CASES: dict[str, dict[str, Any]] = {
    "stepscope": dict(format="stepscope", labels="human:alice", neutral="keep"),
    "stepscope-decisive-model": dict(
        format="stepscope",
        labels="import:synthetic-truth",
        neutral="keep",
        options={"decisive": "model:judge"},
    ),
    "trl-bulk": dict(
        format="trl-stepwise",
        labels="import:synthetic-truth",
        neutral="positive",
        selection="arith",
    ),
    "trl-bulk-json-split": dict(
        format="trl-stepwise",
        labels="import:synthetic-truth",
        neutral="drop",
        selection="arith",
        container="json",
        split="train=0.7,test=0.3",
        seed=3,
    ),
    "trl-rows-critiques": dict(
        format="trl-stepwise",
        labels="human:alice",
        neutral="negative",
        container="parquet",
        options={"critiques": "judge", "decisive": "human:alice"},
    ),
    "prm800k": dict(
        format="prm800k",
        labels="human:majority",
        neutral="keep",
        split="a=0.5,b=0.5",
        options={"stop_at_first_error": False, "decisive": "model:judge"},
    ),
    "processbench": dict(format="processbench", labels="import:synthetic-truth", neutral="keep"),
    "dpo-credit": dict(
        format="dpo",
        labels="import:synthetic-truth",
        neutral="keep",
        credit_run=True,
        options={"pair_value": "credit", "min_margin": 0.1},
    ),
    "dpo-score-corrections": dict(
        format="dpo",
        labels="human:alice",
        neutral="keep",
        scorer="prm",
        container="parquet",
        options={"pair_value": "score", "min_margin": 0.2},
    ),
    "kto": dict(format="kto", labels="model:prm", threshold=0.4, neutral="drop", compress=True),
    "sft": dict(
        format="sft",
        labels="consensus",
        scorer="prm",
        neutral="keep",
        options={"sft": "before_first_error"},
    ),
    "critique": dict(
        format="critique",
        labels="human:alice",
        neutral="keep",
        options={"critiques": "judge", "critique_rows": "agreeing"},
    ),
    "rl-bulk": dict(
        format="rl",
        labels="import:synthetic-truth",
        neutral="keep",
        credit_run=True,
        split="train=0.8,test=0.2",
    ),
    "rl-rows-score": dict(
        format="rl",
        labels="human:alice",
        neutral="keep",
        container="jsonl",
        scorer="prm",
        credit_run=True,
        options={"step_reward": "score", "prompts_per": "trajectory"},
    ),
}


def _ids_from(table: str, first: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s, false)", [table, first])


@pytest.fixture
def world(db: None, tmp_path: Path) -> tuple[Project, AttributionRun]:
    for table in ("trajectories_trajectory", "scoring_attributionrun"):
        _ids_from(table, FIRST_ID)
    project = project_create(slug="golden", name="golden")
    rollouts = tmp_path / "rollouts.jsonl"
    synthetic.write_jsonl(
        rollouts, synthetic.rollouts(tasks=3, rollouts_per_task=3, steps_per_task=4, seed=8)
    )
    trajectory_import(project=project, source_format="stepscope", path=rollouts)
    tools = tmp_path / "tau.json"
    tools.write_text(json.dumps(json.loads(TAU_BENCH.read_text())[:4]), encoding="utf-8")
    trajectory_import(project=project, source_format="openai-messages", path=tools)

    run = scoring.attribution_run_start(project=project, method="group-relative")
    scoring.attribution_run_plan(run_id=run.pk)
    for chunk_id in run.chunks.values_list("pk", flat=True):
        scoring.attribution_chunk_run(chunk_id=chunk_id)
    run.refresh_from_db()
    assert run.status == AttributionRun.Status.DONE, run.error

    rng = random.Random(4)
    alice = User.objects.create(username="alice")
    bob = User.objects.create(username="bob")
    schema = LabelSchema.objects.get(project=project, is_active=True)
    steps = list(
        Step.objects.filter(trajectory__project=project).order_by(
            "trajectory__external_id", "index"
        )
    )
    labels = []
    for step in steps:
        if not step.labelable:
            continue
        for person in (alice, bob):
            if rng.random() < 0.6:
                value = rng.choice((-1, 0, 1))
                labels.append(
                    StepLabel(
                        step=step,
                        annotator=person,
                        schema=schema,
                        value=value,
                        correction=f"Better: {step.index}"
                        if value == -1 and person == alice
                        else "",
                    )
                )
    StepLabel.objects.bulk_create(labels)
    external = Scorer.objects.create(project=project, name="prm", kind=prm.EXTERNAL)
    StepScore.objects.bulk_create(
        StepScore(step=step, scorer=external, value=round(rng.random(), 3))
        for step in steps
        if rng.random() < 0.8
    )
    judge = Scorer.objects.create(
        project=project, name="judge", kind=prm.LLM_JUDGE, model_ref="tiny"
    )
    prompt = JudgePrompt.objects.create(scorer=judge, version=1, template="{task} {step}")
    judged = ScoringRun.objects.create(project=project, scorer=judge, prompt=prompt, status="done")
    for step in steps:
        if step.labelable and rng.random() < 0.5:
            verdict = rng.choice((-1, 0, 1))
            JudgeReply.objects.create(
                run=judged,
                scorer=judge,
                prompt=prompt,
                key=f"s{step.pk}",
                trajectory=step.trajectory,
                step=step,
                text=f"Step {step.index} <b>checked</b>.\n\\boxed{{{verdict}}}",
                critique=f"Step {step.index} <b>checked</b>.",
                verdict=verdict,
                value={1: 1.0, 0: 0.5, -1: 0.0}[verdict],
            )
    trajectories = list(Trajectory.objects.filter(project=project).order_by("external_id"))
    failure_verdicts_write(
        scorer=judge,
        verdicts=[
            VerdictInput(t.pk, "", 1, reason=f"{t.external_id} went wrong")
            for t in trajectories[::2]
        ],
    )
    for t in trajectories[1::3]:
        TrajectoryLabel.objects.create(
            trajectory=t,
            annotator=alice,
            status="submitted",
            first_error_index=1,
            decisive_step=1,
            decisive_reason="alice saw it",
        )
    selection_save(
        project=project, name="arith", filters=selection_parse({"max_steps": 8}), user=alice
    )
    assert Trajectory.objects.filter(project=project, task_key__startswith="arith").exists()
    with connection.cursor() as cursor:
        cursor.execute(
            "ANALYZE labeling_steplabel, trajectories_step, trajectories_trajectory,"
            " scoring_stepcredit, scoring_stepscore, scoring_judgereply"
        )
    return project, run


def digests(out: Path) -> dict[str, str]:
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(out.iterdir())
        if path.is_file()
    }


@pytest.mark.django_db
def test_every_format_writes_the_bytes_it_wrote_before(
    world: tuple[Project, AttributionRun], tmp_path: Path
) -> None:
    project, run = world
    found: dict[str, dict[str, Any]] = {}
    for name, case in CASES.items():
        parameters = dict(case)
        if parameters.get("credit_run"):
            parameters["credit_run"] = run.pk
        plan = export_plan_build(project=project, **parameters)
        out = tmp_path / name
        manifest = export_write(plan, out_dir=out)
        assert manifest["counts"]["trajectories"] > 0, name
        found[name] = {"rows": manifest["counts"]["records"], "files": digests(out)}
    if os.environ.get("STEPSCOPE_GOLDEN_WRITE"):
        GOLDEN.write_text(json.dumps(found, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    for name in CASES:
        assert found[name] == expected[name], name
    assert set(expected) == set(CASES)


@pytest.mark.django_db
def test_the_plan_a_job_keeps_writes_the_same_bytes(
    world: tuple[Project, AttributionRun], tmp_path: Path
) -> None:
    """The worker reads the plan back from its job (``export_plan_of``), without looking
    anything up again; a job queued before plans were kept is resolved from its request.
    Either way the files are the same."""
    project, run = world
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    user = User.objects.get(username="alice")
    for name in ("stepscope-decisive-model", "trl-rows-critiques", "prm800k", "rl-bulk"):
        parameters = dict(CASES[name])
        if parameters.get("credit_run"):
            parameters["credit_run"] = run.pk
        job = export_start(plan=export_plan_build(project=project, **parameters), user=user)
        job = ExportJob.objects.select_related("project").get(pk=job.pk)
        with CaptureQueriesContext(connection) as reading:
            kept = export_plan_of(job)
        assert not reading.captured_queries, "a kept plan looks nothing up"
        assert json.loads(json.dumps(kept.to_json())) == job.options["plan"], name
        export_write(kept, out_dir=tmp_path / name / "kept")
        assert digests(tmp_path / name / "kept") == expected[name]["files"], name

        del job.options["plan"]
        with CaptureQueriesContext(connection) as resolving:
            again = export_plan_of(job)
        assert resolving.captured_queries, "a job without a plan is resolved again"
        assert again.to_json() == kept.to_json(), name
