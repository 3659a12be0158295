"""The bulk export paths (``rl`` Parquet from one CSV COPY, ``trl-stepwise`` JSON built
by PostgreSQL) against the row builders they stand in for: same files, byte for byte,
and the same manifest."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction

from exports.services import (
    ExportCancelled,
    ExportPlan,
    export_manifest,
    export_plan_build,
    export_trajectories,
    export_write,
)
from exports.writers import write_export
from exports.writers.columnar import STEP_CSV, csv_tables
from labeling.models import LabelSchema, StepLabel
from scoring import prm
from scoring import services as scoring
from scoring.models import AttributionRun, Scorer, StepCredit, StepScore
from tests.conftest import REALDATA
from tests.databases import rows_shared
from tests.exports.progress_stubs import CancelledProgress
from trajectories import synthetic
from trajectories.models import Project, Step, Trajectory
from trajectories.services import project_create, trajectory_import
from trajectories.services.progress import ProgressWriter

TAU_BENCH = REALDATA / "tau_bench" / "gpt-4o-airline.json"
PROCESSBENCH = REALDATA / "processbench" / "gsm8k.json"


def row_by_row(plan: ExportPlan, out_dir: Path) -> dict[str, Any]:
    """The export through the row builders (exports.writers.write_export), with the
    manifest export_write builds around it."""
    with transaction.atomic():
        result = write_export(
            export_trajectories(plan),
            format_name=plan.export.name,
            options=plan.request.options,
            out_dir=out_dir,
            container=plan.container,
            compress=plan.request.compress,
            splits=plan.splits,
            seed=plan.request.seed,
        )
    return export_manifest(plan, result)


@pytest.fixture(scope="module")
def mixed_rows(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Project, AttributionRun]]:
    """``mixed``'s rows, written once for the module's tests."""
    with rows_shared(django_db_blocker):
        with django_db_blocker.unblock():
            rows = mixed_write(tmp_path_factory.mktemp("mixed"))
        yield rows


@pytest.fixture
def mixed(db: None, mixed_rows: tuple[Project, AttributionRun]) -> tuple[Project, AttributionRun]:
    return mixed_rows


def mixed_write(tmp_path: Path) -> tuple[Project, AttributionRun]:
    """Arithmetic rollouts with credits and truth labels, tau-bench tool-calling runs
    (tool calls, leading system and user turns, non-ASCII text) and ProcessBench
    problems in one project; a human annotator's -1/0/+1 labels on a sample of every
    kind of step, a scorer's scores on most steps, and a NaN credit."""
    project = project_create(slug="mixed", name="mixed")
    path = tmp_path / "rollouts.jsonl"
    synthetic.write_jsonl(
        path, synthetic.rollouts(tasks=4, rollouts_per_task=3, steps_per_task=4, seed=5)
    )
    trajectory_import(project=project, source_format="stepscope", path=path)
    trajectory_import(project=project, source_format="openai-messages", path=TAU_BENCH)
    trajectory_import(project=project, source_format="processbench", path=PROCESSBENCH)
    run = scoring.attribution_run_start(project=project, method="group-relative")
    scoring.attribution_run_plan(run_id=run.pk)
    for chunk_id in run.chunks.values_list("pk", flat=True):
        scoring.attribution_chunk_run(chunk_id=chunk_id)
    run.refresh_from_db()
    assert run.status == AttributionRun.Status.DONE, run.error
    # A credit that is not a number must come out null on both paths.
    first_credit = StepCredit.objects.filter(run=run).order_by("step_id").first()
    assert first_credit is not None
    StepCredit.objects.filter(pk=first_credit.pk).update(value=math.nan)

    rng = random.Random(11)
    alice = User.objects.create(username="alice")
    schema = LabelSchema.objects.get(project=project, is_active=True)
    scorer = Scorer.objects.create(project=project, name="prm", kind=prm.EXTERNAL)
    steps = list(Step.objects.filter(trajectory__project=project).order_by("id"))
    # In batches: the majority trigger's recount of one large statement can take the
    # fresh test database's planner minutes without statistics.
    StepLabel.objects.bulk_create(
        (
            StepLabel(step=step, annotator=alice, schema=schema, value=rng.choice((-1, 0, 1)))
            for step in steps
            if step.labelable and rng.random() < 0.1
        ),
        batch_size=200,
    )
    StepScore.objects.bulk_create(
        StepScore(step=step, scorer=scorer, value=rng.random())
        for step in steps
        if rng.random() < 0.7
    )
    # Statistics for what the fixture wrote (ANALYZE counts this transaction's own
    # rows). Earlier tests leave these tables full of rolled-back rows, and an
    # autovacuum that found none of them live says any size means no rows: every
    # join then looked free to run as a nested loop over whole tables, and one export
    # query of this project ran for many minutes.
    with connection.cursor() as cursor:
        cursor.execute(
            "ANALYZE labeling_steplabel, auth_user, trajectories_step, trajectories_trajectory,"
            " scoring_stepcredit, scoring_stepscore, labeling_stepmajority"
        )
    return project, run


CASES: dict[str, dict[str, Any]] = {
    "truth labels, credits": dict(labels="import:synthetic-truth", neutral="keep"),
    "human labels, neutral positive": dict(labels="human:alice", neutral="positive"),
    "human labels, neutral dropped": dict(labels="human:alice", neutral="drop"),
    "three splits": dict(labels="human:alice", neutral="negative", split="a=0.5,b=0.3,c=0.2"),
    "rewards from scores": dict(
        labels="human:alice", neutral="keep", scorer="prm", options={"step_reward": "score"}
    ),
    "prompts per trajectory": dict(
        labels="human:alice",
        neutral="keep",
        split="train=0.8,test=0.2",
        options={"prompts_per": "trajectory", "data_source": "mixed"},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_columnar_rl_parquet_is_the_row_builders_files_byte_for_byte(
    mixed: tuple[Project, AttributionRun], tmp_path: Path, case: str
) -> None:
    project, run = mixed
    plan = export_plan_build(project=project, format="rl", credit_run=run.pk, seed=4, **CASES[case])
    with transaction.atomic():
        columnar = export_write(plan, out_dir=tmp_path / "columnar")
    reference = row_by_row(plan, tmp_path / "rows")
    assert columnar == reference
    steps = Step.objects.filter(trajectory__project=project).count()
    assert columnar["counts"]["steps"] == steps
    assert sum(f["rows"] for n, f in columnar["files"].items() if n.startswith("rl-prompts")) > 0
    for name in columnar["files"]:
        assert (tmp_path / "columnar" / name).read_bytes() == (
            tmp_path / "rows" / name
        ).read_bytes()


def test_tool_call_steps_read_as_the_other_formats_write_them(
    mixed: tuple[Project, AttributionRun], tmp_path: Path
) -> None:
    project, run = mixed
    plan = export_plan_build(
        project=project, format="rl", labels="human:alice", neutral="keep", credit_run=run.pk
    )
    export_write(plan, out_dir=tmp_path)
    table = pq.read_table(tmp_path / "rl.parquet")
    step = (
        Step.objects.filter(trajectory__project=project, kind="tool_call")
        .exclude(tool_name="")
        .select_related("trajectory")
        .first()
    )
    assert step is not None
    rows = table.filter(
        pa.compute.and_(
            pa.compute.equal(table["trajectory_id"], step.trajectory_id),
            pa.compute.equal(table["step_index"], step.index),
        )
    ).to_pylist()
    assert len(rows) == 1
    assert rows[0]["step_text"].endswith("</tool_call>")
    assert f'"name": "{step.tool_name}"' in rows[0]["step_text"]
    assert rows[0]["step_text"].startswith(step.content)


def test_a_step_with_two_labels_from_the_source_is_refused(
    mixed: tuple[Project, AttributionRun], tmp_path: Path
) -> None:
    """Two label schemas give alice two labels on one step: which one goes in is not
    for the export to guess, so a source names its schema (and reads that one alone)."""
    project, _ = mixed
    step = StepLabel.objects.filter(annotator__username="alice").first()
    assert step is not None
    second = LabelSchema.objects.create(project=project, name="other")
    StepLabel.objects.create(step=step.step, annotator=step.annotator, schema=second, value=1)
    with pytest.raises(ValueError, match=r"several schemas \('other', 'step quality'\)"):
        export_plan_build(project=project, format="rl", labels="human:alice", neutral="keep")
    plan = export_plan_build(
        project=project, format="rl", labels="human:alice/step quality", neutral="keep"
    )
    export_write(plan, out_dir=tmp_path)
    assert list(tmp_path.glob("*.parquet"))


def test_a_cancelled_columnar_export_leaves_no_file(
    mixed: tuple[Project, AttributionRun], tmp_path: Path
) -> None:
    project, _ = mixed

    plan = export_plan_build(project=project, format="rl", labels="human:alice", neutral="keep")
    with pytest.raises(ExportCancelled):
        export_write(plan, out_dir=tmp_path / "out", progress=CancelledProgress())
    assert list((tmp_path / "out").iterdir()) == []


def test_progress_counts_every_trajectory_once(
    mixed: tuple[Project, AttributionRun], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small CSV pieces, so that trajectories run across tables."""
    from exports.writers import columnar

    monkeypatch.setattr(columnar, "BLOCK_BYTES", 2000)
    project, _ = mixed
    reported: list[int] = []

    class Counting(ProgressWriter):
        def __init__(self) -> None:
            pass

        def report(self, amount: int) -> bool:
            reported.append(amount)
            return False

    plan = export_plan_build(project=project, format="rl", labels="human:alice", neutral="keep")
    export_write(plan, out_dir=tmp_path, progress=Counting())
    assert len(reported) > 10
    assert sum(reported) == Trajectory.objects.filter(project=project).count()


def test_csv_pieces_keep_odd_text_and_rows_larger_than_a_piece() -> None:
    """Quotes, commas, newlines, tabs, backslashes and empty strings as PostgreSQL's CSV
    writes them, a null, and a row far larger than the piece size."""
    texts = ['a "quoted", text', "two\nlines\r\nand\ttab", "back\\slash", "", "x" * 50_000]
    rows = []
    for number, text in enumerate(texts):
        quoted = '"' + text.replace('"', '""') + '"'
        reward = "" if number == 2 else "0.5"
        rows.append(
            f'0,{number},e{number},k,{number},assistant,thought,t,{quoted},{reward},,-1,f,1,""\n'.encode()
        )
    tables = list(csv_tables(rows, STEP_CSV, block_bytes=100))
    table = pa.concat_tables(tables)
    assert len(tables) > 1
    assert table.column("step_text").to_pylist() == texts
    assert table.column("step_reward").to_pylist() == [0.5, 0.5, None, 0.5, 0.5]
    assert table.column("credit").to_pylist() == [None] * 5
    assert table.column("success").to_pylist() == [False] * 5
    assert table.column("tool_call").to_pylist() == [""] * 5


# --- trl-stepwise ------------------------------------------------------------------------


def odd_text_records() -> list[dict[str, Any]]:
    """Steps whose text JSON must escape (quotes, backslashes, control characters,
    newlines), non-ASCII and astral characters, non-labelable steps first and in the
    middle, and a trajectory with no labelable step at all."""
    texts = [
        'she said "7"',
        "back\\slash \\n not a newline",
        "tab\there\nnew line\r\n",
        "bell \x07 and \x1f unit",
        "café ∑ 数学 🧮",
        "\u2028 line separator",
        "plain",
    ]
    records = []
    for number in range(6):
        steps: list[dict[str, Any]] = [{"role": "user", "content": f"question {number}"}]
        for index, text in enumerate(texts[number:] + texts[:number]):
            steps.append({"kind": "thought", "content": f"{index}: {text}"})
            if index == 2:
                steps.append({"role": "tool", "kind": "observation", "content": "seen"})
        records.append(
            {
                "id": f"odd-{number}",
                "task": f'Task {number} with "quotes"',
                "task_key": "" if number % 2 else f"odd-{number // 2}",
                "steps": steps,
            }
        )
    records.append(
        {
            "id": "no-labelable",
            "task": "nothing to label",
            "steps": [{"role": "user", "content": "only a question"}],
        }
    )
    return records


@pytest.fixture(scope="module")
def plain_rows(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Project]:
    """``plain``'s rows, written once for the module's tests."""
    with rows_shared(django_db_blocker):
        with django_db_blocker.unblock():
            project = plain_write(tmp_path_factory.mktemp("plain"))
        yield project


@pytest.fixture
def plain(db: None, plain_rows: Project) -> Project:
    return plain_rows


def plain_write(tmp_path: Path) -> Project:
    """Synthetic rollouts with truth labels, ProcessBench, and the odd-text records; a
    human annotator's -1/0/+1 labels on some of the labelable steps (+1 on every
    odd-text one). No tool calls."""
    project = project_create(slug="plain", name="plain")
    path = tmp_path / "rollouts.jsonl"
    synthetic.write_jsonl(
        path, synthetic.rollouts(tasks=4, rollouts_per_task=3, steps_per_task=4, seed=8)
    )
    trajectory_import(project=project, source_format="stepscope", path=path)
    trajectory_import(project=project, source_format="processbench", path=PROCESSBENCH)
    odd = tmp_path / "odd.jsonl"
    odd.write_text(
        "".join(json.dumps(record) + "\n" for record in odd_text_records()), encoding="utf-8"
    )
    trajectory_import(project=project, source_format="stepscope", path=odd)
    rng = random.Random(3)
    # mixed's rows, alive beside these for the module, have the same annotator.
    alice, _ = User.objects.get_or_create(username="alice")
    schema = LabelSchema.objects.get(project=project, is_active=True)
    StepLabel.objects.bulk_create(
        (
            StepLabel(
                step=step,
                annotator=alice,
                schema=schema,
                # Every odd-text step is good, so those records carry all their text.
                value=1
                if step.trajectory.external_id.startswith("odd")
                else rng.choice((-1, 0, 1)),
            )
            for step in Step.objects.filter(trajectory__project=project, labelable=True)
            .select_related("trajectory")
            .order_by("id")
            if step.trajectory.external_id.startswith("odd") or rng.random() < 0.15
        ),
        batch_size=200,
    )
    return project


TRL_CASES: dict[str, dict[str, Any]] = {
    "truth labels": dict(labels="import:synthetic-truth", neutral="drop"),
    "processbench labels": dict(labels="import:processbench", neutral="negative"),
    "human labels, neutral positive": dict(labels="human:alice", neutral="positive"),
    "human labels, neutral negative, all steps": dict(
        labels="human:alice", neutral="negative", options={"stop_at_first_error": False}
    ),
    "splits, gzip": dict(
        labels="human:alice", neutral="drop", split="train=0.6,test=0.4", compress=True
    ),
    "json array": dict(labels="human:alice", neutral="positive", container="json"),
}


@pytest.mark.parametrize("case", list(TRL_CASES))
def test_trl_stepwise_built_by_postgresql_is_the_row_builders_files_byte_for_byte(
    plain: Project, tmp_path: Path, case: str
) -> None:
    plan = export_plan_build(project=plain, format="trl-stepwise", seed=2, **TRL_CASES[case])
    with transaction.atomic():
        bulk = export_write(plan, out_dir=tmp_path / "bulk")
    reference = row_by_row(plan, tmp_path / "rows")
    assert bulk == reference
    assert bulk["counts"]["records"]["trl-stepwise"] > 0
    for name in bulk["files"]:
        assert (tmp_path / "bulk" / name).read_bytes() == (tmp_path / "rows" / name).read_bytes()


def test_trl_stepwise_records_end_where_the_row_builders_end_them(
    plain: Project, tmp_path: Path
) -> None:
    """The bulk path was taken (no tool calls), and its cuts and skips are counted."""
    from exports.services import bulk

    plan = export_plan_build(
        project=plain, format="trl-stepwise", labels="human:alice", neutral="drop"
    )
    with transaction.atomic():
        result = bulk.bulk_export_write(plan, out_dir=tmp_path)
    assert result is not None
    assert result.notes["cut_at_unlabelled_step"] > 0
    assert result.notes["skipped_no_labelled_step"] > 0
    # split("\n"), not splitlines(): a record holds U+2028 as it is, as JSON allows.
    lines = (tmp_path / "trl-stepwise.jsonl").read_text(encoding="utf-8").split("\n")[:-1]
    records = [json.loads(line) for line in lines]
    completions = [completion for record in records for completion in record["completions"]]
    for text in ('she said "7"', "back\\slash", "bell \x07", "🧮", "\u2028"):
        assert any(text in completion for completion in completions), text
    for record in records:
        assert len(record["completions"]) == len(record["labels"]) > 0
        assert False not in record["labels"][:-1]  # nothing follows the first error


def test_trl_stepwise_with_tool_calls_takes_the_row_builders(
    mixed: tuple[Project, AttributionRun], tmp_path: Path
) -> None:
    from exports.services import bulk

    project, _ = mixed
    plan = export_plan_build(
        project=project, format="trl-stepwise", labels="human:alice", neutral="drop"
    )
    with transaction.atomic():
        assert bulk.bulk_export_write(plan, out_dir=tmp_path / "b") is None
        written = export_write(plan, out_dir=tmp_path / "out")
    assert written == row_by_row(plan, tmp_path / "rows")


def test_trl_stepwise_refuses_a_step_with_two_labels_from_the_source(
    plain: Project, tmp_path: Path
) -> None:
    label = StepLabel.objects.filter(annotator__username="alice").first()
    assert label is not None
    second = LabelSchema.objects.create(project=plain, name="other")
    StepLabel.objects.create(step=label.step, annotator=label.annotator, schema=second, value=1)
    with pytest.raises(ValueError, match="several schemas"):
        export_plan_build(
            project=plain, format="trl-stepwise", labels="human:alice", neutral="positive"
        )
    plan = export_plan_build(
        project=plain, format="trl-stepwise", labels="human:alice/other", neutral="positive"
    )
    export_write(plan, out_dir=tmp_path / "out")
    assert list((tmp_path / "out").iterdir())
