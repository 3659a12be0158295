"""Judge runs in-process (the services called as the tasks call them): prompt versions,
per-step and trajectory runs on the tiny local judge and on the loopback endpoint, parse
failures, cost, resuming a chunk, and the bad inputs that fail a run at its first chunk
with no scores counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.db.models import Sum

from scoring import services
from scoring.models import JudgePrompt, JudgeReply, Scorer, ScoringRun, StepScore
from tests.factories import trajectory_with_steps
from tests.scoring.conftest import JUDGE_KEY_ENV, JUDGE_NAME, OpenAIServer
from tests.scoring.test_judges import LETTERS
from trajectories.models import Project, Step, Trajectory

pytestmark = pytest.mark.django_db


def trajectories(project: Project, count: int = 2, steps: int = 3) -> list[Trajectory]:
    return [
        trajectory_with_steps(
            project, [f"step {i} of {n}: {i} + {n} = {i + n}" for i in range(steps)]
        )
        for n in range(count)
    ]


def local_judge(project: Project, path: Path, name: str = "judge", **raw: Any) -> Scorer:
    parameters = {"max_tokens": 16, "device": "cpu", **raw}
    return services.judge_create(
        name=name, model_ref=str(path), project=project, parameters=parameters
    )


def remote_judge(
    project: Project,
    server: OpenAIServer,
    name: str = "remote",
    model: str = JUDGE_NAME,
    **raw: Any,
) -> Scorer:
    parameters = {
        "backend": "remote",
        "base_url": server.base_url,
        "api_key_env": JUDGE_KEY_ENV,
        "max_tokens": 16,
        "retry_base_seconds": 0.05,
        **raw,
    }
    return services.judge_create(
        name=name, model_ref=model, project=project, parameters=parameters, queue="default"
    )


def run_judge(project: Project, scorer: Scorer, **options: Any) -> ScoringRun:
    run = services.scoring_run_start(project=project, scorer=scorer, **options)
    services.scoring_run_plan(run_id=run.pk)
    for chunk_id in run.chunks.order_by("number").values_list("pk", flat=True):
        services.scoring_chunk_score(chunk_id=chunk_id)
    run.refresh_from_db()
    return run


def labelable(project: Project) -> set[int]:
    return set(Step.objects.filter(trajectory__project=project).values_list("pk", flat=True))


# --- Prompt versions ---------------------------------------------------------------------------


def test_prompt_versions_are_new_rows_and_runs_record_theirs(
    project: Project, tiny_judge: Path
) -> None:
    scorer = local_judge(project, tiny_judge)
    first = scorer.prompts.get()
    assert first.version == 1 and "{history}" in first.template
    second = services.judge_prompt_create(
        scorer=scorer, system="", template="Check {step}. \\boxed{{+1}}?"
    )
    assert second.version == 2
    first.refresh_from_db()
    assert "{history}" in first.template  # the old version is unchanged
    trajectories(project, 1, 1)
    assert run_judge(project, scorer).prompt == second  # the newest by default
    run = run_judge(project, scorer, prompt_version=1)
    assert run.prompt == first and run.metrics["prompt_version"] == 1
    assert set(JudgeReply.objects.filter(run=run).values_list("prompt__version", flat=True)) == {1}


def test_a_prompt_with_an_unknown_placeholder_is_refused_at_creation(
    project: Project, tiny_judge: Path
) -> None:
    scorer = local_judge(project, tiny_judge)
    with pytest.raises(services.ScoringError, match=r"unknown placeholder \{answer\}"):
        services.judge_prompt_create(scorer=scorer, template="{task} {answer}")
    with pytest.raises(services.ScoringError, match=r"unknown placeholder \{steps\}"):
        services.judge_create(
            name="bad", model_ref=str(tiny_judge), project=project, template="{steps}"
        )
    assert not Scorer.objects.filter(name="bad").exists()  # nothing half-made
    assert JudgePrompt.objects.filter(scorer=scorer).count() == 1


# --- Runs on the local judge -------------------------------------------------------------------


def test_a_local_per_step_run_scores_what_it_parses_and_counts_the_rest(
    project: Project, tiny_judge: Path
) -> None:
    trajectories(project, 2, 3)
    # Letters parse on every random reply; the default pattern on none.
    parsing = local_judge(
        project, tiny_judge, "letters", verdict_pattern="([a-z])", verdict_values=LETTERS
    )
    run = run_judge(project, parsing)
    assert run.status == ScoringRun.Status.DONE and run.done == run.total == 6
    replies = JudgeReply.objects.filter(run=run)
    assert replies.count() == 6 and not replies.exclude(parse_error="").exists()
    scores = {s.step_id: s.value for s in StepScore.objects.filter(scorer=parsing)}
    assert set(scores) == labelable(project)
    for reply in replies:
        assert reply.step_id is not None
        assert scores[reply.step_id] == pytest.approx(reply.value)
        assert reply.verdict in (-1, 0, 1) and reply.text and reply.latency_ms > 0
    tokens = replies.aggregate(p=Sum("prompt_tokens"), c=Sum("completion_tokens"))
    assert run.metrics == {
        "mode": "per-step",
        "prompt_version": 1,
        "calls": 6,
        "prompt_tokens": tokens["p"],
        "completion_tokens": tokens["c"],
        "parse_failures": 0,
        "retries": 0,
        "prompts_checked": 6,  # every prompt counted against the context first
    }

    strict = local_judge(project, tiny_judge, "boxed")
    failed = run_judge(project, strict)
    assert failed.status == ScoringRun.Status.DONE and failed.metrics["parse_failures"] == 6
    assert not StepScore.objects.filter(scorer=strict).exists()
    assert all(r.text and r.value is None for r in JudgeReply.objects.filter(run=failed))


def test_a_redelivered_chunk_asks_only_what_has_no_reply(
    project: Project, tiny_judge: Path
) -> None:
    trajectories(project, 1, 3)
    scorer = local_judge(project, tiny_judge, verdict_pattern="([a-z])", verdict_values=LETTERS)
    run = services.scoring_run_start(project=project, scorer=scorer)
    services.scoring_run_plan(run_id=run.pk)
    chunk = run.chunks.get()
    # As if a worker had stored one reply and died.
    services.judges.judge_chunk_score(run, chunk)  # stores all three replies, scores none
    JudgeReply.objects.filter(run=run).exclude(key=f"s{chunk.step_ids[0]}").delete()
    kept = JudgeReply.objects.get(run=run)
    services.scoring_chunk_score(chunk_id=chunk.pk)
    run.refresh_from_db()
    assert run.status == ScoringRun.Status.DONE
    assert JudgeReply.objects.filter(run=run).count() == 3
    assert JudgeReply.objects.filter(run=run).order_by("id").first() == kept  # not asked again
    assert StepScore.objects.filter(scorer=scorer).count() == 3


def test_a_local_prompt_longer_than_the_context_is_skipped_and_listed(
    project: Project, tiny_judge: Path
) -> None:
    """By default one over-long prompt costs its step's verdict, not the run: the other
    steps are judged, and the run says which step went without and why."""
    trajectories(project, 1, 2)
    long = trajectory_with_steps(project, ["Carry the digit and multiply. " * 60])
    scorer = local_judge(
        project,
        tiny_judge,
        max_length=256,
        chunk_steps=2,
        verdict_pattern="([a-z])",  # parses on every random reply
        verdict_values=LETTERS,
    )
    run = run_judge(project, scorer)
    step = long.steps.get()
    assert run.status == ScoringRun.Status.DONE, run.error
    assert run.parameters == {"on_too_long": "skip"}
    scored = set(StepScore.objects.filter(scorer=scorer).values_list("step_id", flat=True))
    assert scored == labelable(project) - {step.pk}
    assert not JudgeReply.objects.filter(run=run, step=step).exists()
    assert run.metrics["skipped_count"] == 1
    (skipped,) = run.metrics["skipped"]
    assert (skipped["trajectory"], skipped["step"]) == (long.pk, step.pk)
    assert "context of 256" in skipped["reason"]


def test_a_local_prompt_longer_than_the_context_fails_the_run_naming_the_step(
    project: Project, tiny_judge: Path
) -> None:
    long = trajectory_with_steps(project, ["Carry the digit and multiply. " * 60])
    scorer = local_judge(project, tiny_judge, max_length=256)
    run = run_judge(project, scorer, on_too_long="fail")
    step = long.steps.get()
    assert run.status == ScoringRun.Status.FAILED
    assert f"step {step.pk} of trajectory {long.pk}" in run.error and "context of 256" in run.error
    assert run.done == 0 and not StepScore.objects.filter(scorer=scorer).exists()
    assert not JudgeReply.objects.filter(run=run).exists()


# --- Runs on the endpoint ----------------------------------------------------------------------


def test_a_remote_trajectory_run_scores_up_to_the_first_wrong_step(
    project: Project, openai_server: OpenAIServer
) -> None:
    trajectories(project, 2, 4)
    openai_server.control(
        fixed_replies=["Step 2 adds wrongly. \\boxed{2}", "All correct, I think."]
    )
    scorer = remote_judge(project, openai_server, mode="trajectory", concurrency=1)
    run = run_judge(project, scorer)
    assert run.status == ScoringRun.Status.DONE and run.done == 8
    # The endpoint answers in the order it is asked, and the trajectories may be asked
    # in either order: "first" is the one that got the first reply.
    asked = JudgeReply.objects.filter(run=run).order_by("id").values_list("trajectory", flat=True)
    first, second = (Trajectory.objects.get(pk=pk) for pk in asked)
    steps = list(first.steps.order_by("index").values_list("pk", flat=True))
    scores = dict(StepScore.objects.filter(scorer=scorer).values_list("step_id", "value"))
    assert scores == {steps[0]: 1.0, steps[1]: 1.0, steps[2]: 0.0}  # step 3 unscored
    replies = {r.trajectory_id: r for r in JudgeReply.objects.filter(run=run)}
    assert replies[first.pk].verdict == 2 and replies[first.pk].step_id is None
    assert replies[first.pk].critique == "Step 2 adds wrongly."
    assert replies[second.pk].parse_error and replies[second.pk].text == "All correct, I think."
    assert run.metrics["calls"] == 2 and run.metrics["parse_failures"] == 1
    assert run.metrics["mode"] == "trajectory"
    assert run.metrics["prompt_tokens"] > 100 and run.metrics["completion_tokens"] > 0


def test_a_remote_per_step_run_retries_and_reads_probabilities(
    project: Project, openai_server: OpenAIServer
) -> None:
    trajectories(project, 1, 3)
    openai_server.control(fail=[429, 503], fixed_reply="Right. \\boxed{+1}")
    scorer = remote_judge(project, openai_server, concurrency=2)
    run = run_judge(project, scorer)
    assert run.status == ScoringRun.Status.DONE
    assert run.metrics["retries"] == 2 and run.metrics["calls"] == 3
    # The endpoint gives the fixed reply's tokens probability 1.
    assert set(StepScore.objects.filter(scorer=scorer).values_list("value", flat=True)) == {1.0}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"base_url": "http://127.0.0.1:9/v1"}, "cannot reach the judge endpoint"),
        ({"api_key_env": "HOME"}, "refused the key from HOME (HTTP 401)"),
        ({"model": "no-such-model"}, "has no model 'no-such-model' (HTTP 404"),
        ({"long": True}, "passes the endpoint's context of 768 tokens"),
    ],
)
def test_bad_endpoints_fail_the_run_at_the_first_chunk_with_nothing_counted(
    project: Project, openai_server: OpenAIServer, change: dict[str, Any], message: str
) -> None:
    if change.pop("long", False):  # in the first chunk
        trajectory_with_steps(project, ["Carry the digit. " * 300])
    trajectories(project, 3, 2)
    model = change.pop("model", JUDGE_NAME)
    scorer = remote_judge(
        project, openai_server, model=model, chunk_steps=2, concurrency=1, **change
    )
    run = run_judge(project, scorer, on_too_long="fail")
    assert run.status == ScoringRun.Status.FAILED and message in run.error
    assert run.done == 0 and run.chunks_done == 0
    assert not StepScore.objects.filter(scorer=scorer).exists()


@pytest.mark.parametrize("tokenize", [True, False])
def test_a_remote_prompt_too_long_is_skipped_counted_by_the_endpoint_or_refused_by_it(
    project: Project, openai_server: OpenAIServer, tokenize: bool
) -> None:
    """Without a tokenizer the endpoint's /tokenize counts the run's longest prompts
    before anything is asked; where it has no such route, its refusal (HTTP 400, "maximum
    context length") skips the step when it is asked. Either way the run goes on."""
    long = trajectory_with_steps(project, ["Carry the digit. " * 300])
    trajectories(project, 2, 2)
    openai_server.control(fixed_reply="Right. \\boxed{+1}", tokenize=tokenize)
    scorer = remote_judge(project, openai_server, chunk_steps=2, concurrency=1)
    run = run_judge(project, scorer)
    step = long.steps.get()
    assert run.status == ScoringRun.Status.DONE, run.error
    scored = set(StepScore.objects.filter(scorer=scorer).values_list("step_id", flat=True))
    assert scored == labelable(project) - {step.pk}
    (skipped,) = run.metrics["skipped"]
    assert skipped["step"] == step.pk and run.metrics["skipped_count"] == 1
    stats = openai_server.stats()
    if tokenize:
        assert "passes the endpoint's context of 768 tokens" in skipped["reason"]
        assert stats["requests"] == 4  # the long prompt was never sent
    else:
        assert "refused the prompt for" in skipped["reason"]
        assert "maximum context length is 768" in skipped["reason"]
        assert stats["requests"] == 5


def test_a_judged_project_and_its_judge_can_be_deleted(project: Project, tiny_judge: Path) -> None:
    """Prompt versions cannot be deleted under their runs, but go with their judge."""
    trajectories(project, 1, 2)
    scorer = local_judge(project, tiny_judge, verdict_pattern="([a-z])", verdict_values=LETTERS)
    run = run_judge(project, scorer)
    assert JudgeReply.objects.filter(run=run).count() == 2
    from django.db.models import RestrictedError

    with pytest.raises(RestrictedError):
        JudgePrompt.objects.filter(scorer=scorer).delete()
    scorer.delete()
    assert not JudgeReply.objects.exists() and not JudgePrompt.objects.exists()
    other = local_judge(
        project, tiny_judge, "again", verdict_pattern="([a-z])", verdict_values=LETTERS
    )
    run_judge(project, other)
    project.delete()
    assert not Scorer.objects.filter(pk=other.pk).exists()
