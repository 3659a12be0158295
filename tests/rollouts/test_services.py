"""Rollout jobs in-process: planning, the prefix handed to the policy, continuations
stored as trajectories, Monte Carlo values, the first-error search, critical steps,
budgets, cancel, redelivery, and the ``mc`` label source.

Celery is not involved here (these tests run inside a transaction, so nothing is
enqueued); the services are called as the tasks call them, and a scripted policy stands
in for the model so outcomes are known. tests/rollouts/test_worker.py covers the queue
and a real model.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import Count
from django.test import Client

from labeling.models import LabelSchema, StepLabel
from labeling.sources import label_source_parse, label_source_sql
from rollouts import selectors, services
from rollouts.generation import Request
from rollouts.models import (
    Continuation,
    Policy,
    RolloutBranch,
    RolloutChunk,
    RolloutJob,
    RolloutSearch,
    StepMC,
)
from rollouts.services import chunks
from tests.factories import UserFactory, trajectory_with_steps
from tests.rollouts.conftest import ScriptedGenerator, arithmetic, continue_correctly
from trajectories.models import ImportBatch, Project, Step, Trajectory
from trajectories.services import trajectory_import

pytestmark = pytest.mark.django_db


def run_job(job: RolloutJob) -> RolloutJob:
    """Plan, then run chunks (including those a search adds) until none is pending."""
    services.rollout_job_plan(job_id=job.pk)
    while True:
        pending = list(
            RolloutChunk.objects.filter(job=job, status=RolloutChunk.Status.PENDING)
            .order_by("number")
            .values_list("pk", flat=True)
        )
        job.refresh_from_db()
        if not pending or not job.is_active:
            return job
        for chunk_id in pending:
            services.rollout_chunk_run(chunk_id=chunk_id)


def start(project: Project, policy: Policy, **options: object) -> RolloutJob:
    return services.rollout_job_start(project=project, policy=policy, **options)  # type: ignore[arg-type]


def test_the_prefix_handed_to_the_policy_is_the_stored_steps_up_to_the_branch(
    project: Project, make_policy: Callable[..., Policy], scripted: Callable[..., ScriptedGenerator]
) -> None:
    trajectory = arithmetic(project, slip=None)
    Step.objects.filter(trajectory=trajectory, index=1).update(role="tool", kind="observation")
    fake = scripted(continue_correctly)
    step = trajectory.steps.get(index=2)
    job = run_job(start(project, make_policy(), k=3, step_ids=[step.pk]))
    assert job.status == RolloutJob.Status.DONE, job.error
    (request,) = fake.requests
    assert request.task == trajectory.task
    stored = list(trajectory.steps.filter(index__lte=2).order_by("index"))
    assert [(s.content, s.role, s.kind) for s in request.steps] == [
        (s.content, s.role, s.kind) for s in stored
    ]
    assert (request.samples, request.first_sample) == (3, 0)


def test_continuations_are_trajectories_sharing_the_parent_prefix(
    project: Project, make_policy: Callable[..., Policy], scripted: Callable[..., ScriptedGenerator]
) -> None:
    parent = arithmetic(project, slip=None, external_id="chain-1", task_key="chain")
    scripted(continue_correctly)
    step = parent.steps.get(index=2)
    job = run_job(start(project, make_policy(), k=2, step_ids=[step.pk]))
    children = list(Trajectory.objects.filter(continuation__branch__job=job).order_by("pk"))
    assert len(children) == 2 == job.done
    parent_hashes = list(parent.steps.order_by("index").values_list("prefix_hash", flat=True))
    for child in children:
        assert child.parent_id == parent.pk
        assert child.branch_index == 3  # its first own step comes after step 2
        assert (child.task_key, child.ground_truth) == ("chain", parent.ground_truth)
        assert child.success is True and child.outcome_reward == 1.0
        assert child.source_format == "rollout"
        assert child.metadata["rollout"]["from_step"] == 2
        own = list(child.steps.order_by("index").values_list("prefix_hash", "content", "metadata"))
        # Steps 0..2 are the parent's, verbatim, so their prefix hashes are the same; the
        # policy's steps follow and end with the answer.
        assert [h for h, _, _ in own[:3]] == parent_hashes[:3]
        assert [m for _, _, m in own] == [{}] * 3 + [{"generated": True}] * 4
        assert own[-1][1] == "The answer is 7."
        assert child.steps.get(index=6).kind == "answer"
        assert child.step_count == len(own) == 7
    assert Continuation.objects.filter(branch__job=job).count() == 2


def test_continuations_stay_out_of_the_projects_recent_imports(
    project: Project,
    owner: User,
    make_policy: Callable[..., Policy],
    scripted: Callable[..., ScriptedGenerator],
    tmp_path: Path,
) -> None:
    """Rollouts write their continuations through the import machinery; those batches
    are the job's, listed in the rollouts section, not among the people's imports."""
    parent = arithmetic(project, slip=None, external_id="chain-1", task_key="chain")
    upload = tmp_path / "mine.jsonl"
    upload.write_text(json.dumps({"id": "a", "task": "t", "steps": [{"content": "hi"}]}) + "\n")
    trajectory_import(project=project, source_format="stepscope", path=upload)
    scripted(continue_correctly)
    job = run_job(start(project, make_policy(), k=2, step_ids=[parent.steps.get(index=2).pk]))
    assert job.status == RolloutJob.Status.DONE, job.error
    written = ImportBatch.objects.filter(project=project, source_format="rollout")
    assert written.exists() and all(batch.internal for batch in written)
    client = Client()
    client.force_login(owner)
    home = client.get(f"/p/{project.slug}/").content.decode()
    section = home[home.index('id="import-batches"') :]
    assert "mine.jsonl" in section
    assert "rollouts-job" not in section and ">rollout<" not in section


def test_hard_and_soft_mc_values_of_a_hand_checked_case(
    project: Project, make_policy: Callable[..., Policy], scripted: Callable[..., ScriptedGenerator]
) -> None:
    """Four continuations per step; the script answers right on samples 0 and 1 from
    step 0, on sample 3 only from step 1, and never from step 2."""
    trajectory = trajectory_with_steps(
        project, ["Think.", "Think more.", "Guess."], ground_truth="5", success=False
    )
    right = {0: {0, 1}, 1: {3}, 2: set()}

    def script(request: Request, sample: int) -> str:
        index = len(request.steps) - 1
        return "The answer is 5." if sample in right[index] else "The answer is 4."

    scripted(script)
    policy = make_policy()
    job = run_job(start(project, policy, k=4, mode=RolloutJob.Mode.ALL))
    assert job.status == RolloutJob.Status.DONE, job.error
    values = {
        mc.step.index: (mc.k, mc.successes, mc.soft, mc.hard)
        for mc in StepMC.objects.filter(policy=policy, step__trajectory=trajectory)
    }
    assert values == {
        0: (4, 2, 0.5, True),
        1: (4, 1, 0.25, True),
        2: (4, 0, 0.0, False),
    }
    assert (job.total, job.done, job.successes) == (12, 12, 3)
    # The mc label source reads them: hard by default, soft against the threshold.
    assert resolve(project, "mc") == {0: 1, 1: 1, 2: -1}
    assert resolve(project, "mc:tiny:soft", threshold=0.5) == {0: 1, 1: -1, 2: -1}
    assert resolve(project, "mc:soft", threshold=0.2) == {0: 1, 1: 1, 2: -1}
    with pytest.raises(ValueError, match="no policy named"):
        resolve(project, "mc:nobody")


def resolve(project: Project, text: str, threshold: float = 0.5) -> dict[int, int]:
    """The source's labels by step index, for this project's non-continuation steps."""
    sql, params = label_source_sql(project, label_source_parse(text, threshold=threshold))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT s.index, r.value FROM ({sql}) r JOIN trajectories_step s ON s.id = r.step_id"
            " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
            " WHERE t.id NOT IN (SELECT trajectory_id FROM rollouts_continuation)",
            params,
        )
        return dict(cursor.fetchall())


def test_label_source_text_round_trips() -> None:
    for text in ("mc", "mc:", "mc:soft", "mc:demo-policy:hard"):
        source = label_source_parse(text)
        assert source.kind == "mc"
        assert label_source_parse(str(source)) == source


def test_steps_sharing_a_prefix_share_one_branch_and_its_value(
    project: Project, make_policy: Callable[..., Policy], scripted: Callable[..., ScriptedGenerator]
) -> None:
    # Two rollouts of one task that part after step 2: steps 0..2 are one prefix.
    first = arithmetic(project, slip=None)
    second = arithmetic(project, slip=3)
    fake = scripted(continue_correctly)
    policy = make_policy()
    job = run_job(start(project, policy, k=2, mode=RolloutJob.Mode.ALL))
    # 7 steps each, 3 shared: 11 distinct prefixes.
    assert job.branches.count() == len(fake.requests) == 11
    for index in range(3):
        a = StepMC.objects.get(step__trajectory=first, step__index=index, policy=policy)
        b = StepMC.objects.get(step__trajectory=second, step__index=index, policy=policy)
        assert (a.successes, a.k) == (b.successes, b.k) == (2, 2)
    # Before the slip the policy succeeds; from the slipped step on it cannot.
    second_values = dict(
        StepMC.objects.filter(step__trajectory=second, policy=policy).values_list(
            "step__index", "hard"
        )
    )
    assert second_values == {0: True, 1: True, 2: True, 3: False, 4: False, 5: False, 6: False}


@pytest.mark.parametrize(("planted", "probes"), [(3, [3, 1, 2]), (0, [3, 1, 0]), (5, [3, 5, 4])])
def test_binary_search_finds_a_planted_first_error_with_the_expected_rollouts(
    project: Project,
    make_policy: Callable[..., Policy],
    scripted: Callable[..., ScriptedGenerator],
    planted: int,
    probes: list[int],
) -> None:
    failed = arithmetic(project, slip=planted)
    fine = arithmetic(project, slip=None)
    fake = scripted(continue_correctly)
    k = 4
    job = run_job(start(project, make_policy(), k=k, mode=RolloutJob.Mode.SEARCH))
    assert job.status == RolloutJob.Status.DONE, job.error
    found = RolloutSearch.objects.get(job=job, trajectory=failed)
    assert found.status == RolloutSearch.Status.FOUND
    assert found.first_error_index == planted
    assert [p[0] for p in found.state["probes"]] == probes
    # ceil(log2(7)) = 3 probes of k: 12 rollouts, where labelling every step takes 28.
    assert found.rollouts == k * len(probes) == 12
    assert len(fake.requests) == len(probes)
    succeeded = RolloutSearch.objects.get(job=job, trajectory=fine)
    assert (succeeded.status, succeeded.first_error_index, succeeded.rollouts) == (
        RolloutSearch.Status.NO_ERROR,
        -1,
        0,
    )
    assert job.done == job.total == 12
    assert job.result["searches"]["found"] == 1
    assert job.result["search_rollouts"] == 12
    # Compared with the planted first error, through the label sources.
    agreement = selectors.job_agreement(job, against="mc")
    assert agreement["first_error"]["acc_erroneous"] == 1.0  # type: ignore[index]


def test_critical_step_check_replaces_the_step_with_a_correction(
    project: Project, make_policy: Callable[..., Policy], scripted: Callable[..., ScriptedGenerator]
) -> None:
    failed = arithmetic(project, slip=2)
    slipped = failed.steps.get(index=2)
    schema = LabelSchema.objects.get(project=project)
    StepLabel.objects.create(
        step=slipped,
        annotator=UserFactory.create(),
        schema=schema,
        value=-1,
        correction="3 + 1 = 4",
    )
    fake = scripted(continue_correctly)
    job = run_job(
        start(project, make_policy(), k=4, mode=RolloutJob.Mode.CRITICAL, step_ids=[slipped.pk])
    )
    assert job.status == RolloutJob.Status.DONE, job.error
    branch = job.branches.get()
    assert (branch.replaced, branch.alternative, branch.alternative_source) == (
        True,
        "3 + 1 = 4",
        "annotator",
    )
    assert fake.requests[0].steps[-1].content == "3 + 1 = 4"
    assert branch.baseline_success is False and branch.successes == 4
    assert branch.critical is True
    assert job.result["critical_steps"] == [slipped.pk]
    child = Trajectory.objects.filter(continuation__branch=branch).first()
    assert child is not None and child.branch_index == 2
    assert child.steps.get(index=2).content == "3 + 1 = 4"


def test_critical_step_without_a_correction_samples_one_from_the_policy(
    project: Project, make_policy: Callable[..., Policy], scripted: Callable[..., ScriptedGenerator]
) -> None:
    failed = arithmetic(project, slip=2)
    slipped = failed.steps.get(index=2)
    fake = scripted(continue_correctly)
    job = run_job(
        start(project, make_policy(), k=2, mode=RolloutJob.Mode.CRITICAL, step_ids=[slipped.pk])
    )
    branch = job.branches.get()
    # The policy's next step from steps 0..1 is the right one: "3 + 1 = 4".
    assert (branch.alternative, branch.alternative_source) == ("3 + 1 = 4", "policy")
    assert branch.critical is True
    assert fake.requests[0].samples == 4  # candidates for the alternative, then k
    assert fake.requests[1].steps[-1].content == "3 + 1 = 4"


def test_a_continuation_budget_stops_the_job(
    project: Project, make_policy: Callable[..., Policy], scripted: Callable[..., ScriptedGenerator]
) -> None:
    arithmetic(project, slip=None)
    scripted(continue_correctly)
    job = run_job(
        start(project, make_policy(), k=4, mode=RolloutJob.Mode.ALL, max_continuations=10)
    )
    assert job.status == RolloutJob.Status.STOPPED
    # Whole branches only: two of the seven fit in ten continuations.
    assert job.done == job.total == 8
    assert job.result["budget_left_out_branches"] == 5
    assert "budget" in job.error


def test_a_search_stops_when_the_budget_runs_out(
    project: Project, make_policy: Callable[..., Policy], scripted: Callable[..., ScriptedGenerator]
) -> None:
    arithmetic(project, slip=3)
    scripted(continue_correctly)
    job = run_job(
        start(project, make_policy(), k=4, mode=RolloutJob.Mode.SEARCH, max_continuations=8)
    )
    assert job.status == RolloutJob.Status.STOPPED
    assert job.done == 8
    found = job.searches.get()
    assert found.status == RolloutSearch.Status.STOPPED and found.rollouts == 8


def test_a_token_budget_stops_the_job_after_the_chunk_that_spends_it(
    project: Project, make_policy: Callable[..., Policy], scripted: Callable[..., ScriptedGenerator]
) -> None:
    arithmetic(project, slip=None)
    scripted(continue_correctly)
    job = start(
        project,
        make_policy(),
        k=2,
        mode=RolloutJob.Mode.ALL,
        max_tokens=5,
        chunk_continuations=2,
    )
    job = run_job(job)
    assert job.status == RolloutJob.Status.STOPPED
    assert job.chunks_done == 1 < job.chunks_total
    assert job.done == 2 and job.tokens >= 5
    assert "token budget" in job.error


def test_cancel_skips_the_chunks_not_yet_run(
    project: Project, make_policy: Callable[..., Policy], scripted: Callable[..., ScriptedGenerator]
) -> None:
    arithmetic(project, slip=None)
    scripted(continue_correctly)
    job = start(project, make_policy(), k=2, mode=RolloutJob.Mode.ALL, chunk_continuations=2)
    services.rollout_job_plan(job_id=job.pk)
    first, *rest = job.chunks.order_by("number")
    services.rollout_chunk_run(chunk_id=first.pk)
    services.rollout_job_cancel(job=job)
    for chunk in rest:
        services.rollout_chunk_run(chunk_id=chunk.pk)
    job.refresh_from_db()
    assert job.status == RolloutJob.Status.CANCELLED
    assert job.done == 2 == Continuation.objects.filter(branch__job=job).count()


def test_cancel_stops_a_chunk_between_batches(
    project: Project, make_policy: Callable[..., Policy], scripted: Callable[..., ScriptedGenerator]
) -> None:
    first, second = arithmetic(project, slip=None), arithmetic(project, slip=1)

    def cancel_then_continue(request: Request, sample: int) -> str:
        RolloutJob.objects.update(status=RolloutJob.Status.CANCELLED)
        return continue_correctly(request, sample)

    fake = scripted(cancel_then_continue)
    steps = [first.steps.get(index=4).pk, second.steps.get(index=4).pk]
    job = run_job(start(project, make_policy(), k=2, step_ids=steps))
    assert job.status == RolloutJob.Status.CANCELLED
    # The second prefix was never generated, and the first one's work was not recorded.
    assert len(fake.requests) == 1
    assert job.done == 0 and not Continuation.objects.exists()
    assert job.chunks.get().status == RolloutChunk.Status.PENDING


def test_a_redelivered_chunk_changes_nothing(
    project: Project, make_policy: Callable[..., Policy], scripted: Callable[..., ScriptedGenerator]
) -> None:
    arithmetic(project, slip=None)
    scripted(continue_correctly)
    job = run_job(start(project, make_policy(), k=2, mode=RolloutJob.Mode.ALL))
    before = (Trajectory.objects.count(), StepMC.objects.count(), job.done)
    for chunk in job.chunks.all():
        services.rollout_chunk_run(chunk_id=chunk.pk)
    services.rollout_job_plan(job_id=job.pk)
    job.refresh_from_db()
    assert (Trajectory.objects.count(), StepMC.objects.count(), job.done) == before
    per_sample = Continuation.objects.values("branch", "sample").annotate(n=Count("pk"))
    assert {row["n"] for row in per_sample} == {1}


def test_a_chunk_that_keeps_dying_fails_the_job(
    project: Project, make_policy: Callable[..., Policy], scripted: Callable[..., ScriptedGenerator]
) -> None:
    arithmetic(project, slip=None, length=1)
    scripted(continue_correctly)
    job = start(project, make_policy(), k=1, mode=RolloutJob.Mode.ALL)
    services.rollout_job_plan(job_id=job.pk)
    chunk = job.chunks.get()
    RolloutChunk.objects.filter(pk=chunk.pk).update(attempts=4)
    services.rollout_chunk_run(chunk_id=chunk.pk)
    job.refresh_from_db()
    assert job.status == RolloutJob.Status.FAILED and "started 4 times" in job.error


def test_start_refuses_what_cannot_run(
    project: Project, make_policy: Callable[..., Policy]
) -> None:
    policy = make_policy()
    other = Project.objects.create(slug="other", name="Other")
    foreign = trajectory_with_steps(other, ["x"]).steps.get()
    for options, message in (
        ({"k": 0}, "k must be"),
        ({"k": 2, "step_ids": [foreign.pk]}, "not in this project"),
        ({"k": 2, "mode": RolloutJob.Mode.STEPS}, "needs the steps"),
        ({"k": 2, "mode": RolloutJob.Mode.ALL, "answer_check": "fuzzy"}, "unknown answer check"),
        ({"k": 2, "mode": RolloutJob.Mode.ALL, "max_tokens": 0}, "max_tokens"),
    ):
        with pytest.raises(services.RolloutError, match=message):
            start(project, policy, **options)
    with pytest.raises(services.RolloutError, match="another project"):
        start(project, make_policy("theirs", project=other), k=2, mode=RolloutJob.Mode.ALL)


def test_policy_create_checks_parameters(project: Project) -> None:
    with pytest.raises(services.RolloutError, match="unknown policy parameter"):
        services.policy_create(name="p", model_ref="x", parameters={"temprature": 1})
    policy = services.policy_create(name="p", model_ref="x", parameters={"temperature": 0.5})
    assert services.policy_spec(policy).params.temperature == 0.5
    with pytest.raises(services.RolloutError, match="exists already"):
        services.policy_create(name="p", model_ref="y")
    assert selectors.policy_by_name(project, "p") == policy


def test_step_panel_lists_the_continuations_and_values(
    project: Project, make_policy: Callable[..., Policy], scripted: Callable[..., ScriptedGenerator]
) -> None:
    trajectory = arithmetic(project, slip=None)
    scripted(continue_correctly)
    step = trajectory.steps.get(index=4)
    run_job(start(project, make_policy(), k=3, step_ids=[step.pk]))
    shown = selectors.step_rollouts(step)
    assert [v.successes for v in shown.values] == [3]
    assert shown.continuation_count == len(shown.continuations) == 3
    assert all(c.success and c.last_step == "The answer is 7." for c in shown.continuations)
    assert shown.active_jobs == []
    assert RolloutBranch.objects.filter(step=step).count() == 1


def test_an_export_takes_mc_labels(
    project: Project,
    make_policy: Callable[..., Policy],
    scripted: Callable[..., ScriptedGenerator],
    tmp_path: Path,
) -> None:
    """``--labels mc``: a stepwise export labels each step with its hard MC estimate."""
    from exports.services import export_plan_build, export_write

    trajectory = arithmetic(project, slip=2, task_key="only")
    scripted(continue_correctly)
    run_job(start(project, make_policy(), k=2, trajectory_ids=[trajectory.pk], mode="all"))
    plan = export_plan_build(
        project=project,
        format="trl-stepwise",
        labels="mc",
        neutral="drop",
        selection="",
        options={"stop_at_first_error": False},
    )
    manifest = export_write(plan, out_dir=tmp_path)
    assert manifest["label_source"] == "mc:"
    rows = [json.loads(line) for line in (tmp_path / "trl-stepwise.jsonl").read_text().splitlines()]
    contents = list(trajectory.steps.order_by("index").values_list("content", flat=True))
    # The parent, and continuations from step 5 that repeat it word for word.
    same = [r["labels"] for r in rows if [c.strip() for c in r["completions"]] == contents]
    assert [True, True, False, False, False, False, False] in same
    # The continuations are trajectories of the project too, labelled the same way.
    assert len(rows) == 1 + job_continuations(project)


def job_continuations(project: Project) -> int:
    return Continuation.objects.filter(trajectory__project=project).count()


def test_a_job_started_against_a_label_source_records_its_agreement(
    project: Project, make_policy: Callable[..., Policy], scripted: Callable[..., ScriptedGenerator]
) -> None:
    """Imported truth says steps 0..2 are good and step 3 is the first error (as the demo's
    generated labels do); a perfect policy's MC labels agree on every one of them."""
    failed = arithmetic(project, slip=3)
    truth = UserFactory.create(username="import:truth", is_active=False)
    schema = LabelSchema.objects.get(project=project)
    for step in failed.steps.filter(index__lte=3):
        StepLabel.objects.create(
            step=step, annotator=truth, schema=schema, value=1 if step.index < 3 else -1
        )
    scripted(continue_correctly)
    with pytest.raises(services.RolloutError, match="against: unknown label source"):
        start(project, make_policy("refused"), k=2, mode=RolloutJob.Mode.ALL, against="truth")
    job = run_job(
        start(project, make_policy(), k=2, mode=RolloutJob.Mode.ALL, against=" import:truth ")
    )
    assert job.status == RolloutJob.Status.DONE, job.error
    assert job.options["against"] == "import:truth"
    agreement = job.result["agreement"]
    assert agreement["against"] == "import:truth"
    assert (agreement["steps_compared"], agreement["step_accuracy"]) == (4, 1.0)
    assert agreement["first_error"]["trajectories"] == 1
    assert agreement["first_error"]["acc_erroneous"] == 1.0


def test_a_real_tiny_model_continues_exactly_the_stored_prefix(
    project: Project, make_policy: Callable[..., Policy]
) -> None:
    """No script: the tiny causal LM decodes greedily. The prompt is the stored task and
    steps 0..2, verbatim (a newline and double space included), rendered in the policy's
    format; what the job stored after them is what the model generates from exactly
    that prompt, and the prompt's length is what the continuation records."""
    from rollouts.generation import PrefixStep
    from rollouts.generation.generator import Generator, Item, generator_build
    from rollouts.generation.prompts import render_prompt

    trajectory = trajectory_with_steps(
        project,
        ["1 + 1 = 2", "2 + 1 =  3\n(checked)", "3 + 1 = 4", "The answer is 4."],
        ground_truth="4",
    )
    step = trajectory.steps.get(index=2)
    policy = make_policy(parameters={"temperature": 0.0, "max_new_tokens": 12})
    job = run_job(start(project, policy, k=2, step_ids=[step.pk]))
    assert job.status == RolloutJob.Status.DONE, job.error

    generator = generator_build(services.policy_spec(policy))
    assert isinstance(generator, Generator)
    stored = [
        PrefixStep(s.content, s.role, s.kind)
        for s in trajectory.steps.filter(index__lte=2).order_by("index")
    ]
    prompt = render_prompt(generator.params, trajectory.task, stored)
    ids = tuple(generator.tokenizer(prompt)["input_ids"])
    request = Request(key=0, task=trajectory.task, steps=tuple(stored), samples=1)
    (batch,) = generator.prepare([Item(request, 0, ids, 0)])
    (expected,) = generator.decode(batch, generator.run(batch))
    assert expected.steps, "the tiny model generated nothing to compare"

    parent_hashes = list(trajectory.steps.order_by("index").values_list("prefix_hash", flat=True))
    children = list(Trajectory.objects.filter(continuation__branch__job=job))
    assert len(children) == 2
    for child in children:
        rollout = child.metadata["rollout"]
        assert (rollout["prompt_tokens"], rollout["dropped_tokens"]) == (len(ids), 0)
        own = list(child.steps.order_by("index").values_list("content", "prefix_hash"))
        assert [c for c, _ in own[:3]] == [s.content for s in stored]
        assert [h for _, h in own[:3]] == parent_hashes[:3]
        assert tuple(c for c, _ in own[3:]) == expected.steps


def test_same_prefix_lookup_probes_the_task_index_while_statistics_are_stale(
    project: Project,
) -> None:
    """Right after an import the planner believes the project small; finding the steps
    that share a prefix must still go through the task index, not hash every task."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO trajectories_trajectory (project_id, external_id, source_format,"
            " task_key, task, ground_truth, model_name, metadata, step_count, content_hash,"
            " created_at) SELECT %s, n::text, 'stepscope', '', 'task ' || (n %% 500), '', '',"
            " '{}', 1, n::text, now() FROM generate_series(1, 3000) AS n",
            [project.pk],
        )
    first = arithmetic(project, slip=None)
    second = arithmetic(project, slip=3)
    step = Step.objects.get(trajectory=first, index=1)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + chunks.SAME_PREFIX_SQL, [[step.pk], project.pk])
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute(chunks.SAME_PREFIX_SQL, [[step.pk], project.pk])
        found = {step_id for step_id, _ in cursor.fetchall()}
    assert "traj_task_md5_project" in plan, plan
    assert found == {step.pk, Step.objects.get(trajectory=second, index=1).pk}
