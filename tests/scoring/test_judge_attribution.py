"""Who&When's failure-attribution judge modes (all at once, step by step, binary search):
their verdict formats and walks without the database, runs on fixed replies from the
test endpoint over a real socket and on the tiny local judge, accuracy against the real
Who&When ground truth with an oracle endpoint, prompts too long for the context caught
before any chunk writes, and the bulk verdict write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from evaluation.decisive import decisive_compare
from labeling.services import agent_steps
from scoring import prm, services
from scoring.judges.config import (
    ALL_AT_ONCE,
    ATTRIBUTION_MODES,
    BINARY_SEARCH,
    DEFAULT_SYSTEM,
    DEFAULT_TEMPLATES,
    STEP_BY_STEP,
    JudgeError,
    judge_params,
    template_check,
)
from scoring.judges.modes import (
    Attribution,
    JudgeRequest,
    Log,
    LogStep,
    Prompt,
    attribution_first,
    attribution_next,
    attribution_problem,
)
from scoring.judges.replies import Verdict, attribution_read
from scoring.models import FailureVerdict, JudgeReply, Scorer, ScoringRun, StepScore
from scoring.services import VerdictInput, failure_verdicts_write
from tests.factories import trajectory_with_steps
from tests.labeling.test_decisive import who_and_when
from tests.scoring.conftest import OpenAIServer
from tests.scoring.test_judge_runs import local_judge, remote_judge, run_judge
from tests.trajectories.test_formats_mapped import WHO_AND_WHEN_COUNTS, WHO_AND_WHEN_DIR
from trajectories.models import Project, Step, Trajectory

AGENTS = ["Planner", "Coder", "Checker"]


def team_log(project: Project, steps: int = 6) -> Trajectory:
    """A failed multi-agent log: a question (an input, no agent) and then the agents in
    turn, step i by AGENTS[(i - 1) % 3]."""
    trajectory = trajectory_with_steps(
        project, ["What is 17 * 23?"] + [f"turn {i}: 17 * 23 = {380 + i}" for i in range(1, steps)]
    )
    for step in trajectory.steps.all():
        if step.index == 0:
            step.role, step.labelable = "user", False
        else:
            step.agent = AGENTS[(step.index - 1) % 3]
        step.save()
    return trajectory


def pure_log(candidates: int = 8) -> Log:
    steps = [LogStep(1000, 0, "user", "the question", candidate=False)]
    steps += [LogStep(1000 + i, i, AGENTS[i % 3], f"turn {i}") for i in range(1, candidates + 1)]
    return Log(7, "the task", tuple(steps))


def prompt(mode: str) -> Prompt:
    return Prompt(DEFAULT_SYSTEM, DEFAULT_TEMPLATES[mode])


def walk(mode: str, log: Log, replies: list[str]) -> tuple[Attribution | None, list[str]]:
    """Follow the mode on scripted replies, in turn; the keys asked, in order."""
    params = judge_params({"mode": mode})
    answers: dict[str, Verdict] = {}
    asked: list[str] = []
    scripted = iter(replies)
    while True:
        following = attribution_next(params, prompt(mode), log, answers)
        if not isinstance(following, JudgeRequest):
            return following, asked
        asked.append(following.key)
        answers[following.key] = attribution_read(mode, next(scripted))


# --- Without the database --------------------------------------------------------------------


def test_the_default_templates_name_only_their_modes_placeholders() -> None:
    for mode in ATTRIBUTION_MODES:
        template_check(mode, DEFAULT_SYSTEM, DEFAULT_TEMPLATES[mode])
    with pytest.raises(JudgeError, match=r"unknown placeholder \{history\} for mode 'all-at-once'"):
        template_check(ALL_AT_ONCE, "{task} {history}")
    with pytest.raises(JudgeError, match="reads its own verdict format"):
        judge_params({"mode": STEP_BY_STEP, "verdict_pattern": "(yes)"})


def test_each_modes_verdict_format_is_read_and_anything_else_is_a_parse_failure() -> None:
    read = attribution_read(ALL_AT_ONCE, "Coder multiplied wrong.\n**Agent:** Coder\n**Step:** 4")
    assert (read.verdict, read.agent, read.critique) == (4, "Coder", "Coder multiplied wrong.")
    # The last pair counts; the agent line may be missing.
    read = attribution_read(ALL_AT_ONCE, "Step: 1 maybe?\nNo:\n- Step: #3")
    assert (read.verdict, read.agent, read.error) == (3, "", "")
    assert attribution_read(ALL_AT_ONCE, "Agent: Coder, at step 3").error == "no 'Step: <n>' line"
    assert attribution_read(STEP_BY_STEP, "It is fine.\nDecisive: **No**").verdict == 0
    assert attribution_read(STEP_BY_STEP, "Wrong product. Decisive: yes").verdict == 1
    assert attribution_read(STEP_BY_STEP, "Decisive: maybe").error
    assert attribution_read(BINARY_SEARCH, "Half: first").verdict == 0
    assert attribution_read(BINARY_SEARCH, "Later on.\nHalf: second").critique == "Later on."
    assert attribution_read(BINARY_SEARCH, "the upper half").error == "no 'Half: first|second' line"


def test_all_at_once_checks_the_step_and_agent_against_the_log() -> None:
    log = pure_log(4)
    params = judge_params({"mode": ALL_AT_ONCE})
    (request,) = attribution_first(params, prompt(ALL_AT_ONCE), log)
    assert request.key == "t7" and "Step 0 [user]: the question" in request.messages[-1]["content"]
    assert "The agents: Coder, Checker, Planner." in request.messages[-1]["content"]
    bad_step = attribution_read(ALL_AT_ONCE, "Step: 9")
    assert attribution_problem(request, bad_step) == (
        "verdict names step 9; the log has steps 0 to 4"
    )
    stranger = attribution_read(ALL_AT_ONCE, "Agent: Reviewer\nStep: 2")
    assert "names agent 'Reviewer'" in attribution_problem(request, stranger)
    # Case and a qualifier do not matter; the log's spelling is kept.
    found, _ = walk(ALL_AT_ONCE, log, ["Agent: checker (thought)\nStep: 2"])
    assert found == Attribution(7, 2, "Checker", "Agent: checker (thought)\nStep: 2", "t7")


def test_step_by_step_stops_at_the_first_yes_and_a_parse_failure_gives_no_verdict() -> None:
    log = pure_log(5)
    found, asked = walk(STEP_BY_STEP, log, ["Decisive: no", "Decisive: no", "Bad. Decisive: yes"])
    assert asked == ["t7:s1", "t7:s2", "t7:s3"]  # the question (step 0) is not a candidate
    assert found is not None and (found.step, found.agent, found.reason) == (3, "", "Bad.")
    found, asked = walk(STEP_BY_STEP, log, ["Decisive: no", "I am not sure."])
    assert found is None and asked == ["t7:s1", "t7:s2"]
    found, asked = walk(STEP_BY_STEP, log, ["Decisive: no"] * 5)
    assert found is not None and found.step is None and len(asked) == 5


def test_binary_search_converges_to_the_scripted_step() -> None:
    log = pure_log(8)  # candidates: steps 1 to 8
    found, asked = walk(BINARY_SEARCH, log, ["Half: second", "Half: first", "Late.\nHalf: second"])
    assert asked == ["t7:b1-8", "t7:b5-8", "t7:b5-6"]
    assert found is not None and (found.step, found.reason, found.reply) == (6, "Late.", "t7:b5-6")
    # Every decisive step is found in ceil(log2(8)) = 3 answers by an oracle.
    for decisive in range(1, 9):
        replies = []
        lo, hi = 1, 8
        while lo < hi:
            middle = (lo + hi) // 2
            replies.append("Half: first" if decisive <= middle else "Half: second")
            lo, hi = (lo, middle) if decisive <= middle else (middle + 1, hi)
        found, asked = walk(BINARY_SEARCH, log, replies)
        assert found is not None and found.step == decisive and len(asked) == 3
    request = attribution_first(judge_params({"mode": BINARY_SEARCH}), prompt(BINARY_SEARCH), log)
    text = request[0].messages[-1]["content"]
    assert "first half, steps 1 to 4, or in the second half, steps 5 to 8" in text


def test_the_local_judge_keeps_what_it_counted_for_encoding_newest_first(
    tiny_judge: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scoring.judges import local
    from scoring.judges.backend import JudgeSpec

    judge = local.LocalJudge(
        JudgeSpec(str(tiny_judge), judge_params({"mode": STEP_BY_STEP, "device": "cpu"}))
    )
    requests = attribution_first(judge.params, prompt(STEP_BY_STEP), pure_log(4))
    fresh = [judge.prompt_ids(r.messages) for r in requests]
    monkeypatch.setattr(local, "COUNTED_TOKENS", sum(map(len, fresh[2:])))
    judge.check(requests)  # keeps the last two only: the first two were pushed out
    assert [len(ids) for ids in judge._counted.values()] == [len(ids) for ids in fresh[2:]]
    calls: list[Any] = []
    original = judge.prompt_ids

    def counting(messages: Any) -> list[int]:
        calls.append(messages)
        return original(messages)

    monkeypatch.setattr(judge, "prompt_ids", counting)
    assert [ids for _, ids in judge.encode(requests)] == fresh
    assert len(calls) == 2 and not judge._counted and judge._counted_tokens == 0


# --- Runs on the endpoint ----------------------------------------------------------------------


def attribution_judge(
    project: Project, server: OpenAIServer, mode: str, name: str = "", **raw: Any
) -> Scorer:
    return remote_judge(project, server, name or mode, mode=mode, concurrency=1, **raw)


def verdicts(scorer: Scorer) -> dict[int, tuple[str, int | None, str]]:
    return {
        v.trajectory_id: (v.agent, v.step, v.reason)
        for v in FailureVerdict.objects.filter(scorer=scorer)
    }


@pytest.mark.django_db
def test_all_at_once_writes_a_verdict_per_log_and_counts_what_it_cannot_read(
    project: Project, openai_server: OpenAIServer
) -> None:
    logs = [team_log(project) for _ in range(3)]
    openai_server.control(
        fixed_replies=[
            "Turn 2 multiplied wrong.\nAgent: Coder\nStep: 2",
            "Agent: Reviewer\nStep: 3",  # no such agent
            "I cannot tell.",
        ]
    )
    scorer = attribution_judge(project, openai_server, ALL_AT_ONCE)
    run = run_judge(project, scorer)
    assert run.status == ScoringRun.Status.DONE and run.done == run.total == 15
    asked = list(JudgeReply.objects.filter(run=run).order_by("id"))
    assert [r.key for r in asked] == [f"t{t.pk}" for t in logs]
    assert verdicts(scorer) == {logs[0].pk: ("Coder", 2, "Turn 2 multiplied wrong.")}
    assert asked[0].verdict == 2 and not asked[0].parse_error and asked[0].step_id is None
    assert "names agent 'Reviewer'" in asked[1].parse_error and asked[1].verdict is None
    assert asked[2].parse_error == "no 'Step: <n>' line" and asked[2].text == "I cannot tell."
    assert all(r.prompt_tokens > 50 and r.completion_tokens > 0 for r in asked)
    metrics = run.metrics
    assert metrics["mode"] == ALL_AT_ONCE and metrics["calls"] == 3
    assert metrics["parse_failures"] == 2 and metrics["verdicts"] == 1
    assert metrics["prompt_tokens"] == sum(r.prompt_tokens for r in asked)
    assert metrics["completion_tokens"] == sum(r.completion_tokens for r in asked)
    assert not StepScore.objects.filter(scorer=scorer).exists()  # verdicts, not scores
    # The prompt showed the whole log, numbered by index, with each step's agent.
    shown = openai_server.stats()["asked"][0]
    assert "Step 0 [user]: What is 17 * 23?" in shown and "Step 5 [Coder]: turn 5" in shown


@pytest.mark.django_db
def test_step_by_step_asks_from_the_start_until_the_first_yes(
    project: Project, openai_server: OpenAIServer
) -> None:
    log = team_log(project)
    openai_server.control(
        fixed_replies=["Fine.\nDecisive: no", "Fine.\nDecisive: no", "Off by one.\nDecisive: yes"]
    )
    scorer = attribution_judge(project, openai_server, STEP_BY_STEP)
    run = run_judge(project, scorer)
    assert run.status == ScoringRun.Status.DONE
    replies = list(JudgeReply.objects.filter(run=run).order_by("id"))
    assert [r.key for r in replies] == [f"t{log.pk}:s{n}" for n in (1, 2, 3)]
    steps = dict(log.steps.values_list("index", "pk"))
    assert [r.step_id for r in replies] == [steps[1], steps[2], steps[3]]
    assert [r.verdict for r in replies] == [0, 0, 1]
    assert verdicts(scorer) == {log.pk: ("Checker", 3, "Off by one.")}
    assert run.metrics["calls"] == 3 and run.metrics["verdicts"] == 1
    asked = openai_server.stats()["asked"]
    assert "Step to judge (step 3, by Checker)" in asked[2]
    assert "Step 2 [Coder]" in asked[2] and "turn 3" not in asked[2].split("Step to judge")[0]


@pytest.mark.django_db
def test_binary_search_halves_the_log_until_one_step_is_left(
    project: Project, openai_server: OpenAIServer
) -> None:
    log = team_log(project, 9)  # candidates: steps 1 to 8
    openai_server.control(fixed_replies=["Half: second", "Half: first", "Here.\nHalf: second"])
    scorer = attribution_judge(project, openai_server, BINARY_SEARCH)
    run = run_judge(project, scorer)
    assert run.status == ScoringRun.Status.DONE
    keys = list(JudgeReply.objects.filter(run=run).order_by("id").values_list("key", flat=True))
    assert keys == [f"t{log.pk}:b1-8", f"t{log.pk}:b5-8", f"t{log.pk}:b5-6"]
    assert verdicts(scorer) == {log.pk: ("Checker", 6, "Here.")}
    asked = openai_server.stats()["asked"]
    assert "steps 5 to 6, or in the second half, steps 7 to 8" in asked[1]
    assert "Step 8 [Coder]" in asked[1] and "Step 7 [Planner]" not in asked[2]  # up to 6
    assert run.metrics["calls"] == 3 and run.metrics["parse_failures"] == 0


@pytest.mark.django_db
def test_a_parse_failure_in_a_multi_call_mode_ends_that_log_with_no_verdict(
    project: Project, openai_server: OpenAIServer
) -> None:
    first, second = team_log(project), team_log(project)
    # Rounds: both logs' step 1, then both logs' step 2.
    openai_server.control(fixed_replies=["Decisive: no", "Hmm.", "Decisive: yes", "never asked"])
    scorer = attribution_judge(project, openai_server, STEP_BY_STEP)
    run = run_judge(project, scorer)
    assert run.status == ScoringRun.Status.DONE
    assert verdicts(scorer) == {first.pk: ("Coder", 2, "Decisive: yes")}
    assert JudgeReply.objects.filter(run=run, trajectory=second).count() == 1
    assert run.metrics["calls"] == 3 and run.metrics["parse_failures"] == 1
    assert openai_server.stats()["requests"] == 3


@pytest.mark.django_db
def test_a_redelivered_multi_call_chunk_asks_only_what_has_no_reply(
    project: Project, openai_server: OpenAIServer
) -> None:
    log = team_log(project, 9)
    openai_server.control(fixed_reply="Half: first")
    scorer = attribution_judge(project, openai_server, BINARY_SEARCH)
    run = services.scoring_run_start(project=project, scorer=scorer)
    services.scoring_run_plan(run_id=run.pk)
    chunk = run.chunks.get()
    services.judges.judge_chunk_score(run, chunk)  # asks all three, finishes nothing
    assert openai_server.stats()["requests"] == 3
    # As if the worker had died after its first two replies.
    JudgeReply.objects.filter(run=run, key=f"t{log.pk}:b1-2").delete()
    services.scoring_chunk_score(chunk_id=chunk.pk)
    run.refresh_from_db()
    assert run.status == ScoringRun.Status.DONE
    assert openai_server.stats()["requests"] == 4  # only the missing reply asked again
    assert verdicts(scorer)[log.pk][:2] == ("Planner", 1)


@pytest.mark.django_db
def test_only_unjudged_asks_the_logs_with_no_verdict_yet(
    project: Project, openai_server: OpenAIServer
) -> None:
    first = team_log(project)
    openai_server.control(fixed_reply="Agent: Coder\nStep: 2")
    scorer = attribution_judge(project, openai_server, ALL_AT_ONCE)
    run_judge(project, scorer)
    second = team_log(project)
    again = run_judge(project, scorer, only_unscored=True)
    assert again.status == ScoringRun.Status.DONE and again.total == 5
    assert list(JudgeReply.objects.filter(run=again).values_list("trajectory", flat=True)) == [
        second.pk
    ]
    assert set(verdicts(scorer)) == {first.pk, second.pk}


# --- Prompts too long for the context ----------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("mode", [STEP_BY_STEP, "per-step"])
@pytest.mark.parametrize("counted_by", ["tokenizer", "endpoint"])
def test_a_too_long_prompt_in_a_later_chunk_fails_the_run_before_any_chunk_writes(
    project: Project, openai_server: OpenAIServer, tiny_judge: Path, mode: str, counted_by: str
) -> None:
    """The remote judge counts every prompt with the tokenizer it is given, or without
    one has the endpoint's /tokenize count the run's longest, against the endpoint's
    context (its /models says 768); the long step is in the last chunk."""
    for _ in range(3):
        team_log(project, 3)
    long = team_log(project, 3)
    Step.objects.filter(trajectory=long, index=2).update(content="Carry the digit. " * 300)
    wanted = long.steps.get(index=2)
    counting = {"tokenizer": str(tiny_judge)} if counted_by == "tokenizer" else {}
    scorer = attribution_judge(project, openai_server, mode, chunk_steps=2, **counting)
    run = run_judge(project, scorer, on_too_long="fail")
    assert run.chunks.count() == 4
    assert run.status == ScoringRun.Status.FAILED
    assert f"the prompt for step {wanted.pk} of trajectory {long.pk} is" in run.error
    assert "the endpoint's context of 768 tokens" in run.error
    assert run.done == 0 and run.chunks_done == 0
    assert not JudgeReply.objects.filter(run=run).exists()
    assert openai_server.stats()["requests"] == 0  # nothing was asked
    # The endpoint counted the longest prompts until one fitted (the long one and the
    # next), or nothing with a tokenizer here.
    assert openai_server.stats()["tokenized"] == (2 if counted_by == "endpoint" else 0)
    assert not FailureVerdict.objects.exists() and not StepScore.objects.exists()


@pytest.mark.django_db
def test_without_a_tokenizer_or_a_tokenize_route_the_refusal_comes_when_the_prompt_is_sent(
    project: Project, openai_server: OpenAIServer
) -> None:
    openai_server.control(tokenize=False, fixed_reply="Agent: Coder\nStep: 1")
    team_log(project, 3)
    long = team_log(project, 3)
    Step.objects.filter(trajectory=long, index=2).update(content="Carry the digit. " * 300)
    scorer = attribution_judge(project, openai_server, ALL_AT_ONCE, chunk_steps=3)
    run = run_judge(project, scorer, on_too_long="fail")
    assert run.status == ScoringRun.Status.FAILED
    assert f"refused the prompt for trajectory {long.pk} as too long (HTTP 400" in run.error
    assert "maximum context length is 768" in run.error
    assert openai_server.stats()["tokenized"] == 0


@pytest.mark.django_db
@pytest.mark.parametrize("tokenize", [True, False])
def test_a_log_too_long_for_the_context_gets_no_verdict_and_the_others_do(
    project: Project, openai_server: OpenAIServer, tokenize: bool
) -> None:
    """Skipping (the default), one over-long log costs its own verdict only: counted by
    the endpoint before anything is asked, or refused by it when asked."""
    openai_server.control(tokenize=tokenize, fixed_reply="Agent: Coder\nStep: 1")
    short = team_log(project, 3)
    long = team_log(project, 3)
    Step.objects.filter(trajectory=long, index=2).update(content="Carry the digit. " * 300)
    scorer = attribution_judge(project, openai_server, ALL_AT_ONCE, chunk_steps=3)
    run = run_judge(project, scorer)
    assert run.status == ScoringRun.Status.DONE, run.error
    assert set(verdicts(scorer)) == {short.pk}
    (skipped,) = run.metrics["skipped"]
    assert (skipped["trajectory"], skipped["step"]) == (long.pk, None)
    assert "768 tokens" in skipped["reason"] and run.metrics["skipped_count"] == 1
    assert openai_server.stats()["requests"] == (1 if tokenize else 2)


@pytest.mark.django_db
def test_a_local_judge_counts_every_chunks_prompts_first(
    project: Project, tiny_judge: Path
) -> None:
    team_log(project, 3)
    long = team_log(project, 3)
    Step.objects.filter(trajectory=long, index=1).update(content="Carry the digit. " * 100)
    scorer = local_judge(project, tiny_judge, mode=ALL_AT_ONCE, max_length=640, chunk_steps=2)
    run = run_judge(project, scorer, on_too_long="fail")
    assert run.chunks.count() == 2 and run.status == ScoringRun.Status.FAILED
    assert f"the prompt for trajectory {long.pk} is" in run.error
    assert "context of 640" in run.error
    assert run.done == 0 and not JudgeReply.objects.filter(run=run).exists()


# --- The tiny local judge ----------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ATTRIBUTION_MODES)
def test_each_mode_runs_on_the_tiny_local_judge(
    project: Project, tiny_judge: Path, mode: str
) -> None:
    """Its random replies follow no format: each log's first reply is a parse failure,
    stored with its text and tokens, and no verdict is written."""
    logs = [team_log(project, 4) for _ in range(2)]
    scorer = local_judge(project, tiny_judge, mode, mode=mode)
    run = run_judge(project, scorer)
    assert run.status == ScoringRun.Status.DONE, run.error
    replies = list(JudgeReply.objects.filter(run=run).order_by("trajectory_id"))
    assert [r.trajectory_id for r in replies] == [t.pk for t in logs]
    assert all(r.text and r.parse_error and r.verdict is None for r in replies)
    assert all(r.prompt_tokens > 20 and 0 < r.completion_tokens <= 16 for r in replies)
    assert run.metrics["calls"] == run.metrics["parse_failures"] == 2
    assert run.metrics["verdicts"] == 0 and not FailureVerdict.objects.exists()
    # Deterministic: a second run gets the same replies.
    again = run_judge(project, scorer)
    texts = list(JudgeReply.objects.filter(run=again).order_by("trajectory_id").values_list("text"))
    assert texts == [(r.text,) for r in replies]


# --- Real Who&When logs ------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ATTRIBUTION_MODES)
def test_an_oracle_judge_on_the_real_who_and_when_logs_is_always_right(
    project: Project, openai_server: OpenAIServer, mode: str
) -> None:
    """The endpoint answers as a judge that knows each log's ground truth would (reading
    the default prompts); the verdicts must then match the imported labels exactly, so
    the agent and step mapping of every mode is right on real logs."""
    oracles = []
    for name in WHO_AND_WHEN_COUNTS:
        who_and_when(project, name)
        raw = json.loads((WHO_AND_WHEN_DIR / name).read_text(encoding="utf-8"))
        truth = {"step": int(raw["mistake_step"]), "agent": raw["mistake_agent"]}
        oracles.append({"task": raw["question"][:80], **truth})
    openai_server.control(oracles=oracles, max_context=100_000)
    scorer = remote_judge(project, openai_server, "oracle", mode=mode, concurrency=4)
    run = run_judge(project, scorer)
    assert run.status == ScoringRun.Status.DONE, run.error
    result = decisive_compare(project, reference="import:mapped", candidate="model:oracle", k=0)
    metrics = result.metrics
    assert metrics.trajectories == 5
    assert (metrics.agent.correct, metrics.step.correct) == (5, 5)
    found = sorted((agent, step) for agent, step, _ in verdicts(scorer).values())
    assert found == sorted((o["agent"], o["step"]) for o in oracles)
    assert run.metrics["parse_failures"] == 0 and run.metrics["verdicts"] == 5
    # The calls each mode needs, from the logs' agents as the labels count them.
    expected = 0
    for log in Trajectory.objects.filter(project=project):
        label = log.verdicts.get()  # the import's
        candidates = sorted(agent_steps(log.pk).by_step)
        if mode == ALL_AT_ONCE:
            expected += 1
        elif mode == STEP_BY_STEP:  # from the first candidate up to the decisive step
            assert label.decisive_step is not None
            expected += len([index for index in candidates if index <= label.decisive_step])
        else:  # halvings: floor or ceil of log2(candidates)
            calls = JudgeReply.objects.filter(run=run, trajectory=log).count()
            assert (len(candidates) - 1).bit_length() >= calls >= len(candidates).bit_length() - 1
            expected += calls
    assert run.metrics["calls"] == expected


# --- The bulk verdict write --------------------------------------------------------------------


@pytest.mark.django_db
def test_verdicts_are_written_in_a_constant_number_of_queries(project: Project) -> None:
    scorer = Scorer.objects.create(project=project, name="judge", kind=prm.EXTERNAL)
    logs = [team_log(project, 4) for _ in range(30)]

    def write(count: int, step: int) -> int:
        with CaptureQueriesContext(connection) as queries:
            failure_verdicts_write(
                scorer=scorer,
                verdicts=[VerdictInput(t.pk, "", step, reason=f"at {step}") for t in logs[:count]],
            )
        return len(queries)

    assert write(3, 1) == write(30, 2)
    rows = list(FailureVerdict.objects.filter(scorer=scorer).values_list("agent", "step"))
    assert len(rows) == 30 and set(rows) == {("Coder", 2)}  # replaced, agent from the step
    # The same trajectory twice in one write: the last verdict stands.
    failure_verdicts_write(
        scorer=scorer, verdicts=[VerdictInput(logs[0].pk, "", 1), VerdictInput(logs[0].pk, "", 3)]
    )
    assert FailureVerdict.objects.get(scorer=scorer, trajectory=logs[0]).step == 3
