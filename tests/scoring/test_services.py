"""Scoring runs in-process: planning into chunks, scoring, idempotent upserts and
redeliveries, cancel and failure, imported scores, and the selectors the pages use.

Celery is not involved here (these tests run inside a transaction, so nothing is
enqueued); the services are called as the tasks call them. tests/scoring/test_worker.py
covers the real queue."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.db.models import Count

from labeling.models import LabelSchema, Queue, StepLabel
from labeling.services import queue_create, queue_item_take
from scoring import prm, selectors, services
from scoring.models import Scorer, ScoringChunk, ScoringRun, StepScore
from scoring.prm.head import Head
from stepscope.jobs.retry import MAX_CHUNK_ATTEMPTS
from tests.factories import UserFactory, trajectory_with_steps
from tests.scoring.conftest import TinyModels
from trajectories.models import Project, Step, Trajectory
from trajectories.selection import TrajectoryFilters
from trajectories.services import project_create

pytestmark = pytest.mark.django_db


def three_trajectories(project: Project) -> list[Trajectory]:
    out = []
    for n in range(3):
        trajectory = trajectory_with_steps(
            project, [f"step {i} of {n}: {i} + {n} = {i + n}" for i in range(3 + n)]
        )
        out.append(trajectory)
    # A tool output is context, never scored.
    Step.objects.filter(trajectory=out[2], index=1).update(labelable=False)
    return out


def run_to_completion(run: ScoringRun) -> ScoringRun:
    services.scoring_run_plan(run_id=run.pk)
    for chunk_id in run.chunks.values_list("pk", flat=True):
        services.scoring_chunk_score(chunk_id=chunk_id)
    run.refresh_from_db()
    return run


def labelable_steps(project: Project) -> set[int]:
    return set(
        Step.objects.filter(trajectory__project=project, labelable=True).values_list(
            "pk", flat=True
        )
    )


def test_a_run_scores_every_labelable_step_once(
    project: Project, make_scorer: Callable[..., Scorer]
) -> None:
    three_trajectories(project)
    scorer = make_scorer(parameters={"chunk_steps": 4})
    run = services.scoring_run_start(project=project, scorer=scorer)
    run = run_to_completion(run)
    assert run.status == ScoringRun.Status.DONE
    assert run.total == run.done == len(labelable_steps(project)) == 11
    # Whole trajectories per chunk: 3 steps (under 4, so the next joins), then 4 + 4.
    assert run.chunks_total == run.chunks_done == 2
    assert [len(c.trajectory_ids) for c in run.chunks.all()] == [2, 1]
    assert run.steps_per_second and run.steps_per_second > 0
    scored = StepScore.objects.filter(scorer=scorer)
    assert set(scored.values_list("step_id", flat=True)) == labelable_steps(project)
    assert all(0 <= s.value <= 1 and s.run_id == run.pk for s in scored)


def test_rerun_updates_in_place(project: Project, make_scorer: Callable[..., Scorer]) -> None:
    three_trajectories(project)
    scorer = make_scorer()
    first = run_to_completion(services.scoring_run_start(project=project, scorer=scorer))
    before = dict(StepScore.objects.values_list("step_id", "value"))
    second = run_to_completion(services.scoring_run_start(project=project, scorer=scorer))
    assert second.status == ScoringRun.Status.DONE
    after = StepScore.objects.filter(scorer=scorer)
    assert after.count() == len(before)
    assert {s.step_id: s.value for s in after} == pytest.approx(before)
    assert set(after.values_list("run_id", flat=True)) == {second.pk}
    assert first.pk != second.pk


def test_a_redelivered_chunk_changes_nothing(
    project: Project, make_scorer: Callable[..., Scorer]
) -> None:
    three_trajectories(project)
    run = run_to_completion(
        services.scoring_run_start(
            project=project, scorer=make_scorer(parameters={"chunk_steps": 1})
        )
    )
    chunk = run.chunks.first()
    assert chunk is not None
    services.scoring_chunk_score(chunk_id=chunk.pk)  # as if the broker delivered it again
    services.scoring_run_plan(run_id=run.pk)  # and the plan
    run.refresh_from_db()
    assert run.done == run.total == 11
    assert run.chunks_done == run.chunks_total
    counts = StepScore.objects.values("step_id").annotate(n=Count("id"))
    assert {row["n"] for row in counts} == {1}


def test_only_unscored_skips_scored_steps(
    project: Project, make_scorer: Callable[..., Scorer]
) -> None:
    first, *_ = three_trajectories(project)
    scorer = make_scorer()
    run_to_completion(
        services.scoring_run_start(project=project, scorer=scorer, trajectory_ids=[first.pk])
    )
    assert StepScore.objects.count() == 3
    rest = run_to_completion(
        services.scoring_run_start(project=project, scorer=scorer, only_unscored=True)
    )
    assert rest.total == 8
    assert StepScore.objects.count() == 11


def test_a_step_scores_the_same_alone_or_with_others(
    project: Project, make_scorer: Callable[..., Scorer]
) -> None:
    """Already-scored steps keep their separator in the model input, so scoring only the
    rest gives the same numbers as scoring everything."""
    three_trajectories(project)
    scorer = make_scorer()
    run_to_completion(services.scoring_run_start(project=project, scorer=scorer))
    everything = dict(StepScore.objects.values_list("step_id", "value"))
    last_steps = Step.objects.filter(trajectory__project=project, index=2)
    StepScore.objects.filter(step__in=last_steps).delete()
    run_to_completion(
        services.scoring_run_start(project=project, scorer=scorer, only_unscored=True)
    )
    scores = dict(StepScore.objects.values_list("step_id", "value"))
    assert scores == pytest.approx(everything, abs=1e-5)


def test_cancel_stops_remaining_chunks(
    project: Project, make_scorer: Callable[..., Scorer]
) -> None:
    three_trajectories(project)
    run = services.scoring_run_start(
        project=project, scorer=make_scorer(parameters={"chunk_steps": 1})
    )
    services.scoring_run_plan(run_id=run.pk)
    first, *rest = run.chunks.all()
    services.scoring_chunk_score(chunk_id=first.pk)
    services.scoring_run_cancel(run=run)
    for chunk in rest:
        services.scoring_chunk_score(chunk_id=chunk.pk)
    run.refresh_from_db()
    assert run.status == ScoringRun.Status.CANCELLED
    assert run.chunks_done == 1
    assert StepScore.objects.count() == len(first.step_ids)


def test_a_broken_model_fails_the_run_with_its_error(
    project: Project, make_scorer: Callable[..., Scorer], tmp_path: Path
) -> None:
    three_trajectories(project)
    scorer = make_scorer(model_ref=str(tmp_path / "missing"))
    run = services.scoring_run_start(project=project, scorer=scorer)
    services.scoring_run_plan(run_id=run.pk)
    chunk = run.chunks.first()
    assert chunk is not None
    with pytest.raises(Exception, match="cannot load"):
        services.scoring_chunk_score(chunk_id=chunk.pk)
    run.refresh_from_db()
    assert run.status == ScoringRun.Status.FAILED
    assert "cannot load the tokenizer" in run.error
    assert run.finished_at is not None


def test_a_chunk_whose_worker_keeps_dying_fails_the_run(
    project: Project, make_scorer: Callable[..., Scorer]
) -> None:
    three_trajectories(project)
    run = services.scoring_run_start(project=project, scorer=make_scorer())
    services.scoring_run_plan(run_id=run.pk)
    ScoringChunk.objects.filter(run=run).update(attempts=MAX_CHUNK_ATTEMPTS)
    services.scoring_chunk_score(chunk_id=run.chunks.first().pk)  # type: ignore[union-attr]
    run.refresh_from_db()
    assert run.status == ScoringRun.Status.FAILED
    assert "never finished" in run.error


def test_a_queue_selects_the_steps_of_its_trajectories(
    project: Project, make_scorer: Callable[..., Scorer]
) -> None:
    first, second, third = three_trajectories(project)
    queue = queue_create(
        project=project,
        name="review",
        created_by=None,
        filters=TrajectoryFilters(min_steps=4),
    )
    assert set(queue.items.values_list("trajectory_id", flat=True)) == {second.pk, third.pk}
    scorer = make_scorer()
    run = run_to_completion(services.scoring_run_start(project=project, scorer=scorer, queue=queue))
    assert run.selection["queue"] == queue.pk
    expected = labelable_steps(project) - set(first.steps.values_list("pk", flat=True))
    assert run.total == run.done == len(expected) == 8
    assert set(StepScore.objects.values_list("step_id", flat=True)) == expected


def test_a_queue_of_another_project_is_refused(
    project: Project, make_scorer: Callable[..., Scorer]
) -> None:
    other = project_create(slug="other", name="Other")
    queue = queue_create(project=other, name="q", created_by=None, filters=TrajectoryFilters())
    with pytest.raises(services.ScoringError, match="another project"):
        services.scoring_run_start(project=project, scorer=make_scorer(), queue=queue)


def test_score_command_takes_a_queue(project: Project, make_scorer: Callable[..., Scorer]) -> None:
    first, *_ = three_trajectories(project)
    queue = queue_create(
        project=project, name="firsts", created_by=None, filters=TrajectoryFilters(max_steps=3)
    )
    make_scorer(name="prm")
    out = io.StringIO()
    call_command("score", "--project", "demo", "--scorer", "prm", "--queue", "firsts", stdout=out)
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    run = ScoringRun.objects.get(pk=summary["run"])
    assert run.selection["queue"] == queue.pk
    run = run_to_completion(run)
    assert run.total == 3
    assert set(StepScore.objects.values_list("step_id", flat=True)) == set(
        first.steps.values_list("pk", flat=True)
    )
    with pytest.raises(CommandError, match="no queue 'nope'"):
        call_command("score", "--project", "demo", "--scorer", "prm", "--queue", "nope")


def test_an_empty_selection_is_done_at_once(
    project: Project, make_scorer: Callable[..., Scorer]
) -> None:
    run = run_to_completion(services.scoring_run_start(project=project, scorer=make_scorer()))
    assert run.status == ScoringRun.Status.DONE and run.total == 0


def test_external_and_foreign_scorers_are_refused(
    project: Project, make_scorer: Callable[..., Scorer]
) -> None:
    external = Scorer.objects.create(name="ext", kind=prm.EXTERNAL, project=project)
    with pytest.raises(services.ScoringError, match="import_scores"):
        services.scoring_run_start(project=project, scorer=external)
    other = Project.objects.create(slug="other", name="Other")
    foreign = make_scorer(project=other)
    with pytest.raises(services.ScoringError, match="another project"):
        services.scoring_run_start(project=project, scorer=foreign)


def test_scorer_parameters_are_checked(project: Project) -> None:
    with pytest.raises(services.ScoringError, match="unknown scorer parameter"):
        services.scorer_create(
            name="x", kind="token-classification", model_ref="m", parameters={"nope": 1}
        )
    with pytest.raises(services.ScoringError, match="needs a model reference"):
        services.scorer_create(name="x", kind="step-tag-lm")


# --- Imported scores -----------------------------------------------------------------------


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_import_scores_creates_an_external_scorer(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second, _ = three_trajectories(project)
    path = write_jsonl(
        tmp_path / "scores.jsonl",
        [
            {"trajectory": first.external_id, "step": 0, "value": 0.9},
            {"trajectory": first.external_id, "step": 2, "value": 0.1},
            {"trajectory": second.external_id, "step": 3, "value": 1},
        ],
    )
    call_command("import_scores", str(path), project=project.slug, scorer="offline-prm")
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["stored"] == 3 and summary["rejected"] == 0
    scorer = Scorer.objects.get(name="offline-prm")
    assert scorer.kind == prm.EXTERNAL and scorer.project == project
    values = {
        (s.step.trajectory_id, s.step.index): s.value
        for s in StepScore.objects.select_related("step")
    }
    assert values == {(first.pk, 0): 0.9, (first.pk, 2): 0.1, (second.pk, 3): 1.0}
    # Again, with a changed value: updated in place, same scorer.
    write_jsonl(path, [{"trajectory": first.external_id, "step": 0, "value": 0.5}])
    call_command("import_scores", str(path), project=project.slug, scorer="offline-prm")
    assert StepScore.objects.count() == 3
    assert StepScore.objects.get(step__trajectory=first, step__index=0).value == 0.5
    assert Scorer.objects.filter(name="offline-prm").count() == 1


def test_import_scores_rejects_bad_lines_with_their_numbers(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, *_ = three_trajectories(project)
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps({"trajectory": first.external_id, "step": 0, "value": 0.5})
        + "\n"
        + "not json\n"
        + json.dumps({"trajectory": "nobody", "step": 0, "value": 0.5})
        + "\n"
        + json.dumps({"trajectory": first.external_id, "step": 99, "value": 0.5})
        + "\n"
        + json.dumps({"trajectory": first.external_id, "step": 1, "value": 1.5})
        + "\n"
    )
    with pytest.raises(SystemExit):
        call_command("import_scores", str(path), project=project.slug, scorer="offline")
    captured = capsys.readouterr()
    assert "line 2: not JSON" in captured.err
    assert "line 3: no trajectory 'nobody'" in captured.err
    assert "line 4: trajectory" in captured.err and "has no step 99" in captured.err
    assert "line 5: 'value' must be a number from 0 to 1" in captured.err
    assert json.loads(captured.out.strip().splitlines()[-1])["stored"] == 0
    assert StepScore.objects.count() == 0  # all or nothing
    call_command(
        "import_scores", str(path), project=project.slug, scorer="offline", skip_invalid=True
    )
    assert StepScore.objects.count() == 1


# --- Selectors -----------------------------------------------------------------------------


def test_step_scores_for_trajectory_uses_the_last_finished_scorer(
    project: Project, make_scorer: Callable[..., Scorer]
) -> None:
    first, *_ = three_trajectories(project)
    assert selectors.step_scores_for_trajectory(first) == {}
    scorer = make_scorer()
    run_to_completion(services.scoring_run_start(project=project, scorer=scorer))
    scores = selectors.step_scores_for_trajectory(first)
    assert set(scores) == set(first.steps.values_list("pk", flat=True))
    assert selectors.step_scores_for_trajectory(first, scorer) == scores


def test_most_uncertain_steps_come_first(project: Project) -> None:
    trajectory = trajectory_with_steps(project, ["a", "b", "c", "d"])
    head = Scorer.objects.create(
        project=project,
        name="head",
        kind=prm.TRAINED_HEAD,
        revision="1",
        artifact={"head": {}},
    )
    steps = list(trajectory.steps.order_by("index"))
    for step, value in zip(steps, [0.9, 0.45, 0.1, 0.6], strict=True):
        StepScore.objects.create(step=step, scorer=head, value=value)
    schema = LabelSchema.objects.get(project=project)
    StepLabel.objects.create(step=steps[1], annotator=UserFactory.create(), schema=schema, value=1)
    ordered = list(selectors.steps_most_uncertain(project).values_list("index", flat=True))
    assert ordered == [3, 0, 2]  # 0.6, 0.9 / 0.1 tie broken by position; labeled step 1 gone


def test_a_new_heads_scoring_run_ranks_the_uncertain_queues(
    project: Project, tiny_models: TinyModels
) -> None:
    """Training a head and scoring with it re-ranks "most uncertain first" queues, so the
    next lease follows the newest head's scores of the real steps."""
    three_trajectories(project)
    queue = queue_create(
        project=project,
        name="teach",
        created_by=None,
        filters=TrajectoryFilters(),
        order=Queue.Order.UNCERTAIN,
    )
    assert not queue.items.filter(uncertainty__isnull=False).exists()  # nothing scored yet
    weights = np.random.default_rng(0).normal(size=64) * 3
    head = Scorer.objects.create(
        project=project,
        name="head",
        kind=prm.TRAINED_HEAD,
        revision="1",
        model_ref=str(tiny_models.encoder),
        artifact={"head": Head(tuple(float(w) for w in weights), 0.1).to_dict()},
    )
    run = run_to_completion(services.scoring_run_start(project=project, scorer=head))
    assert run.status == ScoringRun.Status.DONE
    ranks = dict(queue.items.values_list("trajectory_id", "uncertainty"))
    scores = StepScore.objects.filter(scorer=head)
    expected = {
        t: min(
            abs(v - 0.5)
            for v in scores.filter(step__trajectory_id=t).values_list("value", flat=True)
        )
        for t in ranks
    }
    assert ranks == pytest.approx(expected)
    most_uncertain = min(expected, key=lambda t: expected[t])
    taken = queue_item_take(queue=queue, annotator=UserFactory.create())
    assert taken is not None and taken.item.trajectory_id == most_uncertain
