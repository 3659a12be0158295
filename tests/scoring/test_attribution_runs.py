"""Attribution runs in-process: every CPU method over stored steps against hand-computed
credits, read back from PostgreSQL; reruns replace; redeliveries and cancels; model
methods through the chunk service with a tiny model.

Celery is not involved here (these tests run inside a transaction, so nothing is
enqueued); the services are called as the tasks call them. tests/scoring/test_attribution_worker.py
covers the real queues."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from django.db.models import Count

from labeling.models import StepLabel
from scoring import copyio, methods, prm, services
from scoring.models import AttributionRun, Scorer, StepCredit, StepScore
from tests.factories import trajectory_with_steps
from trajectories.models import Project, Step, Trajectory
from trajectories.services import imported_annotator

pytestmark = pytest.mark.django_db

GRPO_STD = np.sqrt(1 / 3)  # unbiased std of outcomes (0, 1, 1)


def make_rollouts(project: Project) -> dict[str, Trajectory]:
    """Task t1: A fails, B and C succeed; A and B share two steps, C shares the first.
    Task t2: E has A's first two steps (same task text, so the same prefix hashes) but is
    another task, so its prefixes must not merge with t1's."""
    shapes = {
        "A": (["x", "y", "z"], "t1", False),
        "B": (["x", "y", "w"], "t1", True),
        "C": (["x", "v"], "t1", True),
        "E": (["x", "y"], "t2", True),
    }
    out = {}
    for name, (contents, task_key, success) in shapes.items():
        out[name] = trajectory_with_steps(
            project,
            contents,
            task_key=task_key,
            success=success,
            outcome_reward=1.0 if success else 0.0,
            external_id=name,
        )
    return out


def external_scorer(project: Project, values: dict[int, float]) -> Scorer:
    scorer = Scorer.objects.create(project=project, name="ext", kind=prm.EXTERNAL, queue="default")
    StepScore.objects.bulk_create(
        StepScore(step_id=pk, scorer=scorer, value=value) for pk, value in values.items()
    )
    return scorer


def step_ids(trajectory: Trajectory) -> list[int]:
    return list(trajectory.steps.order_by("index").values_list("pk", flat=True))


def run_to_completion(run: AttributionRun) -> AttributionRun:
    services.attribution_run_plan(run_id=run.pk)
    for chunk_id in run.chunks.values_list("pk", flat=True):
        services.attribution_chunk_run(chunk_id=chunk_id)
    run.refresh_from_db()
    assert run.status == AttributionRun.Status.DONE, run.error
    return run


def credits_of(run: AttributionRun, trajectory: Trajectory) -> list[float]:
    rows = StepCredit.objects.filter(run=run, step__trajectory=trajectory).order_by("step__index")
    return [row.value for row in rows]


def levels_of(run: AttributionRun, trajectory: Trajectory) -> list[float | None]:
    rows = StepCredit.objects.filter(run=run, step__trajectory=trajectory).order_by("step__index")
    return [row.level for row in rows]


@pytest.fixture
def rollouts(project: Project) -> dict[str, Trajectory]:
    return make_rollouts(project)


@pytest.fixture
def scorer(project: Project, rollouts: dict[str, Trajectory]) -> Scorer:
    a, b, c = (step_ids(rollouts[name]) for name in "ABC")
    values = dict(zip(a, [0.9, 0.6, 0.2], strict=True))
    values.update(zip(b, [0.9, 0.8, 0.7], strict=True))
    values.update(zip(c, [0.9, 0.4], strict=True))  # C's steps are scored, E's are not
    return external_scorer(project, values)


def start(project: Project, method: str, **kwargs: Any) -> AttributionRun:
    return run_to_completion(
        services.attribution_run_start(project=project, method=method, **kwargs)
    )


# --- Hand-computed credits, stored and read back -------------------------------------------


def test_prm_delta(project: Project, rollouts: dict[str, Trajectory], scorer: Scorer) -> None:
    run = start(project, "prm-delta", scorer=scorer)
    assert credits_of(run, rollouts["A"]) == pytest.approx([-0.1, -0.3, -0.4])
    assert levels_of(run, rollouts["A"]) == pytest.approx([0.9, 0.6, 0.2])
    assert credits_of(run, rollouts["C"]) == pytest.approx([-0.1, -0.5])
    assert credits_of(run, rollouts["E"]) == []  # unscored steps get no credit
    assert run.total == run.done == 8
    assert run.scorer_revision == scorer.revision
    assert {"read_s", "math_s", "write_s"} <= set(run.metrics)


def test_prm_delta_from_another_initial_value(
    project: Project, rollouts: dict[str, Trajectory], scorer: Scorer
) -> None:
    run = start(project, "prm-delta", scorer=scorer, parameters={"initial": 0.5})
    assert credits_of(run, rollouts["A"]) == pytest.approx([0.4, -0.3, -0.4])


def test_aggregate_puts_the_trajectory_score_on_its_steps(
    project: Project, rollouts: dict[str, Trajectory], scorer: Scorer
) -> None:
    run = start(project, "aggregate", scorer=scorer, parameters={"how": "min"})
    assert credits_of(run, rollouts["A"]) == pytest.approx([0.2] * 3)
    assert credits_of(run, rollouts["B"]) == pytest.approx([0.7] * 3)
    # Shown with the outcome: the failure scores lowest.
    assert run.metrics["auroc_vs_success"] == 1.0
    product = start(project, "aggregate", scorer=scorer, parameters={"how": "product"})
    assert credits_of(product, rollouts["C"]) == pytest.approx([0.36, 0.36])


def test_returns_of_the_outcome_alone(project: Project, rollouts: dict[str, Trajectory]) -> None:
    run = start(project, "returns", parameters={"gamma": 0.5})
    assert credits_of(run, rollouts["A"]) == pytest.approx([0.0, 0.0, 0.0])
    assert credits_of(run, rollouts["B"]) == pytest.approx([0.25, 0.5, 1.0])
    assert run.metrics["rewards"] == "none"


def test_returns_with_labels_as_step_rewards(
    project: Project, rollouts: dict[str, Trajectory]
) -> None:
    annotator = imported_annotator("tests")
    schema = project.label_schemas.get()
    b = list(rollouts["B"].steps.order_by("index"))
    StepLabel.objects.bulk_create(
        StepLabel(step=step, annotator=annotator, schema=schema, value=value)
        for step, value in zip(b, [1, 0, -1], strict=True)
    )
    run = start(project, "returns", label_source="import:tests", parameters={"gamma": 0.5})
    # G2 = -1 + 1 (outcome) = 0; G1 = 0 + 0.5 * 0 = 0; G0 = 1 + 0.5 * 0 = 1.
    assert credits_of(run, rollouts["B"]) == pytest.approx([1.0, 0.0, 0.0])
    assert run.label_source == "import:tests" and run.metrics["rewards"] == "labels"


def test_returns_with_the_scorer_as_step_rewards(
    project: Project, rollouts: dict[str, Trajectory], scorer: Scorer
) -> None:
    run = start(project, "returns", scorer=scorer, parameters={"gamma": 1.0})
    # A: rewards 0.9, 0.6, 0.2 and outcome 0.
    assert credits_of(run, rollouts["A"]) == pytest.approx([1.7, 0.8, 0.2])
    assert run.metrics["rewards"] == "scorer"


def test_gae(project: Project, rollouts: dict[str, Trajectory], scorer: Scorer) -> None:
    # lam = 1: G_t - V_t with G = 1 for the success B.
    full = start(project, "gae", scorer=scorer, parameters={"gamma": 1.0, "lam": 1.0})
    assert credits_of(full, rollouts["B"]) == pytest.approx([0.1, 0.2, 0.3])
    assert levels_of(full, rollouts["B"]) == pytest.approx([0.9, 0.8, 0.7])
    # lam = 0: one-step TD errors; A: 0.6 - 0.9, 0.2 - 0.6, 0 + 0 - 0.2.
    td = start(project, "gae", scorer=scorer, parameters={"gamma": 1.0, "lam": 0.0})
    assert credits_of(td, rollouts["A"]) == pytest.approx([-0.3, -0.4, -0.2])
    # gamma = 0.5, lam = 0.5 on B: delta = (-0.5, -0.45, 0.3); A_2 = 0.3,
    # A_1 = -0.45 + 0.25 * 0.3 = -0.375, A_0 = -0.5 + 0.25 * -0.375 = -0.59375.
    half = start(project, "gae", scorer=scorer, parameters={"gamma": 0.5, "lam": 0.5})
    assert credits_of(half, rollouts["B"]) == pytest.approx([-0.59375, -0.375, 0.3])


def test_mc_prefix_values_and_advantages(project: Project, rollouts: dict[str, Trajectory]) -> None:
    run = start(project, "mc-prefix")
    # t1: x is visited by A, B, C (2 successes): 2/3; y by A, B: 1/2; z: 0; w: 1; v: 1.
    assert levels_of(run, rollouts["A"]) == pytest.approx([2 / 3, 1 / 2, 0.0])
    assert levels_of(run, rollouts["B"]) == pytest.approx([2 / 3, 1 / 2, 1.0])
    assert levels_of(run, rollouts["C"]) == pytest.approx([2 / 3, 1.0])
    # Child minus parent; the first step against the task's mean outcome (2/3).
    assert credits_of(run, rollouts["A"]) == pytest.approx([0.0, -1 / 6, -1 / 2])
    assert credits_of(run, rollouts["B"]) == pytest.approx([0.0, -1 / 6, 1 / 2])
    assert credits_of(run, rollouts["C"]) == pytest.approx([0.0, 1 / 3])
    # E shares A's prefix hashes but is another task: its own tree, value 1 throughout.
    assert levels_of(run, rollouts["E"]) == pytest.approx([1.0, 1.0])
    assert credits_of(run, rollouts["E"]) == pytest.approx([0.0, 0.0])
    assert run.metrics["tasks"] == 2 and run.metrics["nodes"] == 7


def test_mc_prefix_posterior_means(project: Project, rollouts: dict[str, Trajectory]) -> None:
    run = start(project, "mc-prefix", parameters={"posterior": True})
    # Beta(1, 1) prior: x has 2 of 3 -> 3/5; the root 2 of 3 as well -> 3/5.
    assert levels_of(run, rollouts["A"]) == pytest.approx([3 / 5, 2 / 4, 1 / 3])
    assert credits_of(run, rollouts["A"]) == pytest.approx([0.0, 2 / 4 - 3 / 5, 1 / 3 - 2 / 4])


def test_group_relative_grpo_and_rloo(project: Project, rollouts: dict[str, Trajectory]) -> None:
    grpo = start(project, "group-relative")
    assert credits_of(grpo, rollouts["A"]) == pytest.approx([-2 / 3 / GRPO_STD] * 3, rel=1e-5)
    assert credits_of(grpo, rollouts["C"]) == pytest.approx([1 / 3 / GRPO_STD] * 2, rel=1e-5)
    assert credits_of(grpo, rollouts["E"]) == pytest.approx([0.0, 0.0])  # a group of one
    rloo = start(project, "group-relative", parameters={"baseline": "rloo"})
    assert credits_of(rloo, rollouts["A"]) == pytest.approx([-1.0] * 3)
    assert credits_of(rloo, rollouts["B"]) == pytest.approx([0.5] * 3)
    plain = start(project, "group-relative", parameters={"scale_by_std": False})
    assert credits_of(plain, rollouts["B"]) == pytest.approx([1 / 3] * 3)


def test_first_error_from_the_prm_and_from_mc(
    project: Project, rollouts: dict[str, Trajectory], scorer: Scorer
) -> None:
    prm_run = start(project, "first-error", scorer=scorer)
    flagged = StepCredit.objects.filter(run=prm_run).select_related("step")
    # A drops under 0.5 at step 2, C at step 1; B never does.
    assert {(c.step.trajectory.external_id, c.step.index) for c in flagged} == {("A", 2), ("C", 1)}
    assert {c.value for c in flagged} == {-1.0}
    assert sorted(c.level for c in flagged if c.level is not None) == pytest.approx([0.2, 0.4])
    mc_run = start(project, "first-error", parameters={"source": "mc"})
    flagged = StepCredit.objects.filter(run=mc_run).select_related("step")
    # A's third step is the first prefix no rollout got through to success.
    assert [(c.step.trajectory.external_id, c.step.index) for c in flagged] == [("A", 2)]


def test_selection_by_trajectory(
    project: Project, rollouts: dict[str, Trajectory], scorer: Scorer
) -> None:
    run = start(project, "prm-delta", scorer=scorer, trajectory_ids=[rollouts["B"].pk])
    assert set(StepCredit.objects.filter(run=run).values_list("step__trajectory", flat=True)) == {
        rollouts["B"].pk
    }


# --- Reruns, redeliveries, cancel, refusals -------------------------------------------------


def test_rerun_with_the_same_parameters_replaces(
    project: Project, rollouts: dict[str, Trajectory], scorer: Scorer
) -> None:
    first = start(project, "gae", scorer=scorer, parameters={"gamma": 1.0, "lam": 1.0})
    before = dict(StepCredit.objects.filter(run=first).values_list("step_id", "value"))
    StepScore.objects.filter(step=rollouts["B"].steps.get(index=0)).update(value=0.5)
    again = start(project, "gae", scorer=scorer, parameters={"lam": 1.0})  # gamma 1 by default
    assert again.pk == first.pk
    assert AttributionRun.objects.filter(method="gae").count() == 1
    after = dict(StepCredit.objects.filter(run=again).values_list("step_id", "value"))
    assert set(after) == set(before)
    assert StepCredit.objects.filter(run=again).count() == len(before)
    assert credits_of(again, rollouts["B"]) == pytest.approx([0.5, 0.2, 0.3])
    other = start(project, "gae", scorer=scorer, parameters={"lam": 0.5})
    assert other.pk != first.pk


def test_a_running_run_is_not_started_twice(
    project: Project, rollouts: dict[str, Trajectory]
) -> None:
    first = services.attribution_run_start(project=project, method="mc-prefix")
    second = services.attribution_run_start(project=project, method="mc-prefix")
    assert first.pk == second.pk and second.status == AttributionRun.Status.QUEUED


def test_a_redelivered_cpu_chunk_changes_nothing(
    project: Project, rollouts: dict[str, Trajectory]
) -> None:
    run = start(project, "group-relative")
    chunk = run.chunks.get()
    services.attribution_chunk_run(chunk_id=chunk.pk)
    services.attribution_run_plan(run_id=run.pk)
    run.refresh_from_db()
    assert run.done == run.total == 10
    counts = StepCredit.objects.filter(run=run).values("step").annotate(n=Count("id"))
    assert len(counts) == 10 and {row["n"] for row in counts} == {1}


def test_a_cancelled_run_writes_nothing(project: Project, rollouts: dict[str, Trajectory]) -> None:
    run = services.attribution_run_start(project=project, method="returns")
    services.attribution_run_plan(run_id=run.pk)
    run = services.attribution_run_cancel(run=run)
    assert run.status == AttributionRun.Status.CANCELLED
    for chunk in run.chunks.all():
        services.attribution_chunk_run(chunk_id=chunk.pk)
    assert not StepCredit.objects.filter(run=run).exists()


@pytest.mark.parametrize(
    ("method", "kwargs", "message"),
    [
        ("nonsense", {}, "unknown method"),
        ("prm-delta", {}, "needs a scorer"),
        ("gae", {"parameters": {"lam": 2}}, "at most 1"),
        ("gae", {"parameters": {"gama": 0.9}}, "no parameter 'gama'"),
        ("mc-prefix", {"label_source": "human:majority"}, "does not take step rewards"),
        ("returns", {"label_source": "human:nobody-here"}, "nobody-here"),
        ("token-saliency", {}, "needs a scorer"),
    ],
)
def test_bad_requests_are_refused(
    project: Project, method: str, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(services.AttributionError, match=message):
        services.attribution_run_start(project=project, method=method, **kwargs)


def test_a_method_that_needs_a_model_refuses_external_scores(
    project: Project, rollouts: dict[str, Trajectory], scorer: Scorer
) -> None:
    with pytest.raises(services.AttributionError, match="no model"):
        services.attribution_run_start(project=project, method="leave-one-out", scorer=scorer)


# --- Model methods in-process --------------------------------------------------------------


def test_leave_one_out_matches_a_direct_computation(
    project: Project, make_scorer: Callable[..., Scorer]
) -> None:
    from scoring.prm import adapters

    trajectory = trajectory_with_steps(
        project, ["16 - 3 = 13 eggs remain.", "13 - 4 = 9 to sell.", "9 * 2 = 18 dollars."]
    )
    Step.objects.filter(trajectory=trajectory, index=1).update(labelable=False)
    scorer = make_scorer(parameters={"chunk_steps": 8})
    run = start(project, "leave-one-out", scorer=scorer)
    got = dict(StepCredit.objects.filter(run=run).values_list("step__index", "value"))
    assert set(got) == {0, 2}  # the tool output stays as context and gets no credit

    model = adapters.scorer_load(services.scorer_spec(scorer))
    full = prm.TrajectoryInput(
        trajectory.pk,
        trajectory.task,
        tuple(
            prm.StepInput(s.pk, s.content, s.role, labelable=s.labelable, score=False)
            for s in trajectory.steps.order_by("index")
        ),
    )

    def last_score(steps: tuple[prm.StepInput, ...]) -> float:
        """The scorer's value after the last step of the edited trajectory."""
        read = (*steps[:-1], dataclasses.replace(steps[-1], score=True))
        [result] = model.score([prm.TrajectoryInput(full.key, full.task, read)])
        return result.value

    v_all = last_score(full.steps)
    without_0 = last_score(full.steps[1:])
    without_2 = last_score(full.steps[:1])  # the tool output after it is cut as well
    assert got[0] == pytest.approx(v_all - without_0, abs=1e-5)
    assert got[2] == pytest.approx(v_all - without_2, abs=1e-5)


def test_shapley_over_steps_is_efficient(
    project: Project, make_scorer: Callable[..., Scorer]
) -> None:
    for n in range(2):
        trajectory_with_steps(project, [f"{n} + {i} = {n + i}" for i in range(4)])
    scorer = make_scorer(parameters={"chunk_steps": 8})
    run = start(project, "shapley", scorer=scorer, parameters={"permutations": 3, "seed": 7})
    assert run.metrics["trajectories"] == 2 and run.metrics["over_steps"] == 2
    assert run.metrics["efficiency_gap_max"] < 1e-9
    assert run.metrics["exact_trajectories"] == 0 and run.metrics["mean_std_error"] >= 0
    assert StepCredit.objects.filter(run=run).count() == 8
    exact = start(project, "shapley", scorer=scorer, parameters={"permutations": 64})
    assert exact.metrics["exact_trajectories"] == 2
    assert exact.metrics["efficiency_gap_max"] < 1e-9


def test_shapley_over_agents(project: Project, make_scorer: Callable[..., Scorer]) -> None:
    trajectory = trajectory_with_steps(project, ["plan it", "do it", "check it", "answer"])
    for index, agent in enumerate(["planner", "coder", "planner", "coder"]):
        Step.objects.filter(trajectory=trajectory, index=index).update(agent=agent)
    scorer = make_scorer()
    run = start(project, "shapley", scorer=scorer)
    credits = list(
        StepCredit.objects.filter(run=run).select_related("step").order_by("step__index")
    )
    details = [c.detail or {} for c in credits]
    assert [d.get("agent") for d in details] == ["planner", "coder", "planner", "coder"]
    # Each agent's value is shared by its two steps.
    planner = details[0]["agent_value"]
    assert credits[0].value == pytest.approx(planner / 2) == pytest.approx(credits[2].value)
    assert run.metrics["over_agents"] == 1 and run.metrics["exact_trajectories"] == 1
    assert run.metrics["efficiency_gap_max"] < 1e-9


# --- Binary COPY -------------------------------------------------------------------------


def test_binary_copy_round_trip_through_postgres(project: Project) -> None:
    trajectory = trajectory_with_steps(project, ["a", "b", "c"])
    run = AttributionRun.objects.create(project=project, method="returns", key="k")
    ids = np.array(step_ids(trajectory), dtype=np.int64)
    credits = methods.Credits(ids, np.array([0.5, -1.25, 3.0]), np.array([0.1, 0.2, 0.3]))
    assert services.credits_write(run, credits) == 3
    rows = list(
        StepCredit.objects.filter(run=run).order_by("step_id").values_list("value", "level")
    )
    assert rows == [(0.5, 0.1), (-1.25, 0.2), (3.0, 0.3)]
    assert services.credits_write(run, methods.Credits(ids[:1], np.array([np.inf]))) == 0
    assert not StepCredit.objects.filter(run=run).exists()
    with pytest.raises(ValueError, match="NULL"):
        copyio.decode(copyio.encode([("int8", ids), ("float8", None)], 3), ["int8", "float8"])
