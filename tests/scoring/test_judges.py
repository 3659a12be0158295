"""LLM judges without the database: templates, the verdict parser, the modes, the local
generation path on the tiny random judge, and the remote client against the test
endpoint over a real socket (tests/scoring/openai_server.py)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from scoring.judges.backend import JudgeSpec, Reply
from scoring.judges.config import (
    DEFAULT_SYSTEM,
    DEFAULT_TEMPLATES,
    PER_STEP,
    TRAJECTORY,
    JudgeError,
    PromptTooLong,
    judge_params,
    template_check,
)
from scoring.judges.local import LocalJudge
from scoring.judges.modes import JudgeRequest, Prompt, requests_build, step_values
from scoring.judges.remote import RemoteJudge
from scoring.judges.replies import TokenLogprob, verdict_read
from scoring.prm.base import StepInput, TrajectoryInput
from tests.scoring.conftest import JUDGE_CONTEXT, JUDGE_KEY_ENV, JUDGE_NAME, OpenAIServer

# Every lowercase letter a verdict: on the random model's (deterministic) replies this
# pattern always finds one, so the modes can be followed on real generated text.
LETTERS = {chr(c): (1, 0, -1)[c % 3] for c in range(ord("a"), ord("z") + 1)}


def trajectory(key: int = 1, steps: int = 3, text: str = "16 - 3 = 13") -> TrajectoryInput:
    return TrajectoryInput(
        key,
        "Janet has 16 eggs and eats 3.",
        tuple(StepInput(key * 100 + i, f"{text} ({i})") for i in range(steps)),
    )


def default_prompt(mode: str) -> Prompt:
    return Prompt(DEFAULT_SYSTEM, DEFAULT_TEMPLATES[mode])


def collect(judge: LocalJudge | RemoteJudge, requests: list[JudgeRequest]) -> dict[str, Reply]:
    replies: dict[str, Reply] = {}
    judge.judge(requests, lambda request, reply: replies.__setitem__(request.key, reply))
    return replies


# --- Templates and parameters ---------------------------------------------------------------


def test_a_template_with_an_unknown_placeholder_is_refused_naming_it() -> None:
    with pytest.raises(JudgeError, match=r"unknown placeholder \{answer\}.*\{history\}"):
        template_check(PER_STEP, "{task} {answer}")
    with pytest.raises(JudgeError, match=r"unknown placeholder \{history\}"):
        template_check(TRAJECTORY, "{task} {history}")
    with pytest.raises(JudgeError, match=r"placeholder \{\+1\}.*literal braces"):
        template_check(PER_STEP, "\\boxed{+1} {task}")
    with pytest.raises(JudgeError, match="expected '}'"):
        template_check(PER_STEP, "{task")
    for mode in (PER_STEP, TRAJECTORY):
        template_check(mode, DEFAULT_SYSTEM, DEFAULT_TEMPLATES[mode])


def test_judge_parameters_are_checked_by_name() -> None:
    with pytest.raises(JudgeError, match="'temprature'"):
        judge_params({"temprature": 0.5})
    with pytest.raises(JudgeError, match="'base_url'"):
        judge_params({"backend": "remote"})
    with pytest.raises(JudgeError, match="NAME of an environment variable"):
        judge_params({"api_key_env": "sk-live-1234 secret"})
    with pytest.raises(JudgeError, match="verdict_pattern"):
        judge_params({"verdict_pattern": "no group"})
    assert judge_params({"temperature": 1}).temperature == 1.0


# --- The parser, on fixed replies ------------------------------------------------------------


def test_the_last_boxed_verdict_counts_and_the_critique_is_what_precedes_it() -> None:
    params = judge_params()
    read = verdict_read(params, "At first \\boxed{+1} seemed right, but 13 - 4 is 9.\n\\boxed{-1}")
    assert (read.verdict, read.value, read.parsed) == (-1, 0.0, True)
    assert read.critique == "At first \\boxed{+1} seemed right, but 13 - 4 is 9."
    assert verdict_read(params, "\\boxed{ 1 }").value == 1.0
    assert verdict_read(params, "Unclear. \\boxed{0}").value == 0.5


def test_a_reply_without_a_verdict_is_a_parse_failure_with_no_value() -> None:
    read = verdict_read(judge_params(), "I think the step is fine.")
    assert not read.parsed and read.value is None and read.verdict is None
    assert "no verdict" in read.error


def test_a_custom_pattern_and_values_read_verdict_lines() -> None:
    params = judge_params(
        {
            "verdict_pattern": r"Verdict:\s*(correct|incorrect)",
            "verdict_values": {"correct": 1, "incorrect": -1},
        }
    )
    assert verdict_read(params, "Fine.\nVerdict: Correct").verdict == 1
    assert verdict_read(params, "Verdict: incorrect").value == 0.0
    assert not verdict_read(params, "Verdict: maybe").parsed


def test_the_verdict_tokens_logprobs_give_a_probability() -> None:
    text = "Looks right. \\boxed{+1}"
    at = text.index("+")
    tokens = [
        TokenLogprob(text[:at], -0.1),
        TokenLogprob("+", math.log(0.6), {"+": math.log(0.6), "-": math.log(0.3), "x": -1.0}),
        TokenLogprob("1}", -0.01),
    ]
    read = verdict_read(judge_params(), text, tokens)
    assert read.verdict == 1
    assert read.value == pytest.approx(0.6 / 0.9)
    # Without alternatives that are signs, the discrete value stays.
    plain = [TokenLogprob(text[:at], -0.1), TokenLogprob("+1}", -0.2, {"+1}": -0.2, "ab": -3.0})]
    assert verdict_read(judge_params(), text, plain).value == 1.0


# --- Modes -----------------------------------------------------------------------------------


def test_per_step_requests_show_the_steps_before_and_never_after() -> None:
    params = judge_params()
    requests = requests_build(params, default_prompt(PER_STEP), [trajectory(steps=3)])
    assert [r.key for r in requests] == ["s100", "s101", "s102"]
    second = requests[1].messages[-1]["content"]
    assert "Step 0: 16 - 3 = 13 (0)" in second
    assert "(1)" in second and "(2)" not in second
    assert requests[0].messages[0] == {"role": "system", "content": DEFAULT_SYSTEM}
    assert "(none)" in requests[0].messages[-1]["content"]


def test_trajectory_mode_scores_before_the_first_wrong_step_and_nothing_after() -> None:
    params = judge_params({"mode": TRAJECTORY})
    shown = TrajectoryInput(
        7,
        "task",
        (
            StepInput(70, "a"),
            StepInput(71, "tool output", labelable=False, score=False),
            StepInput(72, "b"),
            StepInput(73, "c"),
        ),
    )
    (request,) = requests_build(params, default_prompt(TRAJECTORY), [shown])
    assert request.key == "t7" and "4 steps numbered from 0" in request.messages[-1]["content"]

    def values(reply: str) -> tuple[dict[int, float], str]:
        return step_values(params, request, verdict_read(params, reply))

    assert values("Step 2 subtracts wrongly. \\boxed{2}") == ({70: 1.0, 72: 0.0}, "")
    assert values("All fine. \\boxed{-1}") == ({70: 1.0, 72: 1.0, 73: 1.0}, "")
    # The named step is context, not scored: the steps before it are.
    assert values("\\boxed{1}") == ({70: 1.0}, "")
    out_of_range, problem = values("\\boxed{9}")
    assert out_of_range == {} and "names step 9" in problem


# --- The local path, on the tiny random judge ------------------------------------------------


def test_the_local_judge_generates_the_same_replies_in_any_batching(tiny_judge: Path) -> None:
    raw = {"max_tokens": 20, "verdict_pattern": "([a-z])", "verdict_values": LETTERS}
    requests = requests_build(
        judge_params(raw), default_prompt(PER_STEP), [trajectory(1, 3), trajectory(2, 2)]
    )
    one = collect(LocalJudge(JudgeSpec(str(tiny_judge), judge_params(raw))), requests)
    batched = LocalJudge(JudgeSpec(str(tiny_judge), judge_params({**raw, "batch_size": 5})))
    five = collect(batched, requests)
    assert set(one) == {r.key for r in requests}
    assert {k: r.text for k, r in one.items()} == {k: r.text for k, r in five.items()}
    params = judge_params(raw)
    for reply in one.values():
        assert 0 < reply.completion_tokens <= 20 and reply.prompt_tokens > 50
        # Alternatives that decode alike (broken UTF-8) are one entry.
        assert reply.tokens and all(0 < len(t.top) <= 5 for t in reply.tokens)
        read = verdict_read(params, reply.text, list(reply.tokens))
        assert read.parsed and read.value is not None and 0 <= read.value <= 1
    # The default pattern finds no \boxed{} in random text: parse failures, not scores.
    assert not any(verdict_read(judge_params(), r.text).parsed for r in one.values())


def test_a_local_prompt_longer_than_the_context_fails_before_generating(
    tiny_judge: Path,
) -> None:
    params = judge_params({"max_tokens": 16, "max_length": 300})
    judge = LocalJudge(JudgeSpec(str(tiny_judge), params))
    long = trajectory(3, 2, text="Multiply the numbers and carry the digit. " * 30)
    requests = requests_build(params, default_prompt(PER_STEP), [trajectory(1, 1), long])
    replies: list[str] = []
    with pytest.raises(JudgeError, match=r"step 300 of trajectory 3 is \d+ tokens.*context of 300"):
        judge.judge(requests, lambda request, reply: replies.append(request.key))
    assert replies == []


# --- The remote client, over a socket --------------------------------------------------------


def remote(server: OpenAIServer, **raw: object) -> RemoteJudge:
    params = judge_params(
        {
            "backend": "remote",
            "base_url": server.base_url,
            "api_key_env": JUDGE_KEY_ENV,
            "max_tokens": 20,
            "retry_base_seconds": 0.05,
            **raw,
        }
    )
    return RemoteJudge(JudgeSpec(JUDGE_NAME, params))


def test_the_endpoint_serves_the_same_model_as_the_local_path(
    openai_server: OpenAIServer, tiny_judge: Path
) -> None:
    raw = {"max_tokens": 20}
    requests = requests_build(judge_params(raw), default_prompt(PER_STEP), [trajectory(1, 3)])
    local = collect(LocalJudge(JudgeSpec(str(tiny_judge), judge_params(raw))), requests)
    over_http = collect(remote(openai_server, **raw), requests)
    assert {k: r.text for k, r in over_http.items()} == {k: r.text for k, r in local.items()}
    for key, reply in over_http.items():
        assert reply.prompt_tokens == local[key].prompt_tokens
        assert reply.completion_tokens == local[key].completion_tokens
        assert reply.tokens is not None and len(reply.tokens[0].top) > 1
        assert reply.tokens[0].logprob == pytest.approx(local[key].tokens[0].logprob, abs=1e-4)  # type: ignore[index]


def test_429_and_500_are_retried_honouring_retry_after(openai_server: OpenAIServer) -> None:
    openai_server.control(fail=[429, 500, 503], retry_after=1, fixed_reply="Fine. \\boxed{+1}")
    judge = remote(openai_server, concurrency=1, max_retries=3)
    requests = requests_build(judge.params, default_prompt(PER_STEP), [trajectory(1, 1)])
    started = time.monotonic()
    replies = collect(judge, requests)
    assert time.monotonic() - started >= 1.0  # the 429's Retry-After was waited out
    assert replies["s100"].text == "Fine. \\boxed{+1}"
    assert judge.retries == 3
    assert openai_server.stats()["statuses"] == {"429": 1, "500": 1, "503": 1, "200": 1}


def test_retries_give_up_with_the_last_status(openai_server: OpenAIServer) -> None:
    openai_server.control(fail=[500, 500, 500])
    judge = remote(openai_server, concurrency=1, max_retries=2)
    requests = requests_build(judge.params, default_prompt(PER_STEP), [trajectory(1, 1)])
    with pytest.raises(JudgeError, match=r"failed 3 times for step 100.*HTTP 500"):
        collect(judge, requests)


def test_requests_run_concurrently_up_to_the_limit(openai_server: OpenAIServer) -> None:
    openai_server.control(delay=0.3, fixed_reply="\\boxed{+1}")
    judge = remote(openai_server, concurrency=3)
    requests = requests_build(
        judge.params, default_prompt(PER_STEP), [trajectory(1, 4), trajectory(2, 5)]
    )
    started = time.monotonic()
    replies = collect(judge, requests)
    elapsed = time.monotonic() - started
    assert len(replies) == 9
    assert openai_server.stats()["max_in_flight"] == 3
    assert elapsed < 9 * 0.3  # not one at a time


def test_bad_endpoints_fail_saying_which(openai_server: OpenAIServer) -> None:
    requests = requests_build(judge_params(), default_prompt(PER_STEP), [trajectory(1, 1)])
    with pytest.raises(JudgeError, match=r"refused the key from PATH \(HTTP 401\)"):
        collect(remote(openai_server, api_key_env="PATH"), requests)
    with pytest.raises(JudgeError, match="has no model 'gpt-none'"):
        collect(RemoteJudge(JudgeSpec("gpt-none", remote(openai_server).params)), requests)
    with pytest.raises(
        JudgeError, match=r"cannot reach the judge endpoint http://127\.0\.0\.1:9/v1"
    ):
        collect(remote(openai_server, base_url="http://127.0.0.1:9/v1"), requests)
    with pytest.raises(JudgeError, match=r"STEPSCOPE_NO_SUCH_KEY.*is not set"):
        remote(openai_server, api_key_env="STEPSCOPE_NO_SUCH_KEY")
    long = trajectory(3, 1, text="Carry the digit. " * 200)
    too_long = requests_build(judge_params(), default_prompt(PER_STEP), [long])
    # A prompt past the context is a PromptTooLong naming its request, so a run that
    # skips such prompts can skip it alone.
    with pytest.raises(
        PromptTooLong,
        match=rf"step 300.*too long \(HTTP 400.*maximum context length is {JUDGE_CONTEXT}",
    ) as refused:
        collect(remote(openai_server), too_long)
    assert refused.value.request == too_long[0]
    assert openai_server.stats()["statuses"].get("429", 0) == 0


def test_trajectory_mode_on_the_local_judges_own_replies(tiny_judge: Path) -> None:
    """On random text, the last digit is the verdict: the steps before it score 1, it 0,
    later ones nothing; no digit, or one past the steps shown, is a parse failure."""
    raw = {"mode": TRAJECTORY, "max_tokens": 24, "verdict_pattern": r"(\d)"}
    params = judge_params(raw)
    shown = [trajectory(n, 4) for n in range(1, 7)]
    requests = requests_build(params, default_prompt(TRAJECTORY), shown)
    replies = collect(LocalJudge(JudgeSpec(str(tiny_judge), params)), requests)
    outcomes = set()
    for request in requests:
        text = replies[request.key].text
        values, problem = step_values(params, request, verdict_read(params, text))
        digits = [c for c in text if c.isdigit()]
        steps = [key for key, _ in request.scored]
        if not digits:
            assert values == {} and problem == "no verdict matching the pattern"
            outcomes.add("none")
        elif int(digits[-1]) >= len(steps):
            assert values == {} and f"names step {digits[-1]}" in problem
            outcomes.add("out of range")
        else:
            first_wrong = int(digits[-1])
            expected = {key: 1.0 for key in steps[:first_wrong]} | {steps[first_wrong]: 0.0}
            assert values == expected and problem == ""
            outcomes.add("scored")
    assert outcomes  # every reply fell in one of the cases
