"""The reward service's Django-free parts: request items parsed with their errors named,
rewards folded from step values, and the worker's batching core on a tiny model loaded
through the real loading code."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from scoring import prm
from scoring.judges.backend import JudgeSpec, judge_load
from scoring.judges.config import (
    DEFAULT_SYSTEM,
    DEFAULT_TEMPLATES,
    PER_STEP,
    JudgeError,
    judge_params,
)
from scoring.judges.modes import Prompt
from scoring.prm import adapters
from scoring.rewards.inputs import (
    RewardInputError,
    openrlhf_parse,
    rewards_fold,
    scorer_inputs,
    trajectories_parse,
)
from scoring.rewards.serve import (
    SpecCache,
    judge_wire,
    model_loader,
    scorer_wire,
    serve_batch,
    trajectories_wire,
)
from tests.scoring.conftest import TinyModels

RECORD = {
    "id": "r1",
    "task": "What is 16 - 3 - 4, times 2?",
    "steps": [
        {"role": "user", "content": "Solve it."},
        {"content": "Step 1: 16 - 3 = 13."},
        {"content": "Step 2: 13 - 4 = 9."},
        {"content": "The answer is 9 * 2 = 18."},
    ],
}
MESSAGES = [
    {"role": "system", "content": "You are careful."},
    {"role": "user", "content": "Let x be such that 3x + 5 = 20."},
    {"role": "assistant", "content": "3x = 15."},
    {"role": "assistant", "content": "So x = 5."},
]


def test_records_runs_and_bare_message_lists_parse_with_their_steps() -> None:
    parsed = trajectories_parse([RECORD, {"messages": MESSAGES, "id": "m"}, MESSAGES])
    assert [len(t.steps) for t in parsed] == [4, 4, 4]
    assert [s.labelable for s in parsed[0].steps] == [False, True, True, True]
    assert [s.labelable for s in parsed[2].steps] == [False, False, True, True]
    assert parsed[1].task == "Let x be such that 3x + 5 = 20."


@pytest.mark.parametrize(
    ("item", "field", "words"),
    [
        ([{"role": "assistant", "content": "ok"}, {"content": "no role"}], "1.role", "missing"),
        ([{"role": "robot", "content": "hi"}], "0.role", "'robot'"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages.0.content", "int"),
        ({"id": "x", "task": "t", "steps": [{"content": 1}]}, "steps.0.content", "str"),
        ({"id": "x", "task": "t", "steps": [], "oops": 1}, "oops", "unknown"),
        ({"prompt": "neither"}, "", "neither steps"),
        (7, "", "got int"),
    ],
)
def test_a_bad_item_is_named_by_its_index_and_field(item: Any, field: str, words: str) -> None:
    with pytest.raises(RewardInputError) as raised:
        trajectories_parse([RECORD, item])
    expected = f"trajectories.1.{field}" if field else "trajectories.1"
    # A bare list of messages names the message by its place in the list.
    assert raised.value.field in {expected, expected.replace("1.", "1.messages.", 1)}
    assert words.lower() in raised.value.message.lower()


def test_openrlhf_queries_lose_their_prompt_and_split_into_steps() -> None:
    prompt = "Q: what is 2+2?\n"
    parsed = openrlhf_parse(
        [prompt + "Step 1: 2+2.\n\nStep 2: it is 4.", "no prompt here"],
        [prompt, "other"],
        separator="\n\n",
    )
    assert parsed[0].task == prompt
    assert [s.content for s in parsed[0].steps] == ["Step 1: 2+2.", "Step 2: it is 4."]
    assert parsed[1].task == ""
    assert [s.content for s in parsed[1].steps] == ["no prompt here"]
    with pytest.raises(RewardInputError, match="prompts: has 1 entries for 2 queries"):
        openrlhf_parse(["a", "b"], ["a"], separator="\n\n")
    with pytest.raises(RewardInputError) as raised:
        openrlhf_parse(["a", 5], None, separator="\n\n")
    assert raised.value.field == "query.1"


def test_rewards_fold_over_scored_steps_only() -> None:
    values: list[list[float | None]] = [[None, 0.9, 0.5, 0.8], [None, None], [0.4]]
    by = {how: [r.reward for r in rewards_fold(values, how=how)] for how in ("min", "mean")}
    assert by["min"] == [0.5, None, 0.4]
    assert by["mean"][0] == pytest.approx((0.9 + 0.5 + 0.8) / 3)
    product = rewards_fold(values, how="product")[0].reward
    assert product == pytest.approx(0.9 * 0.5 * 0.8)
    assert rewards_fold(values, how="last")[0].reward == 0.8
    credits = rewards_fold(values, how="min", credit="prm-delta")[0].credits
    assert credits is not None and credits[0] is None
    assert credits[1:] == pytest.approx([0.9 - 1.0, 0.5 - 0.9, 0.8 - 0.5])
    with pytest.raises(ValueError, match="unknown aggregate 'max'"):
        rewards_fold(values, how="max")


def _request(request_id: str, spec: prm.ScorerSpec, items: list[Any], deadline: float) -> Any:
    return {
        "id": request_id,
        "scorer": scorer_wire(spec, key="1@"),
        "trajectories": trajectories_wire(scorer_inputs(trajectories_parse(items))),
        "deadline": deadline,
    }


def close(actual: Any, expected: Any) -> bool:
    """Nested lists of step values equal within float noise (batch padding changes the
    last bits), with None where None."""
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(close(a, e) for a, e in zip(actual, expected, strict=True))
        )
    if expected is None or actual is None:
        return actual is expected
    return math.isclose(actual, expected, rel_tol=1e-4, abs_tol=1e-5)


class CountingScorer:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[int] = []

    def score(self, trajectories: list[prm.TrajectoryInput]) -> list[prm.StepResult]:
        self.calls.append(len(trajectories))
        results: list[prm.StepResult] = self.inner.score(trajectories)
        return results


def test_requests_for_one_scorer_share_one_call_and_get_what_they_would_alone(
    tiny_models: TinyModels,
) -> None:
    spec = prm.ScorerSpec(
        kind=prm.TOKEN_CLASSIFICATION,
        model_ref=str(tiny_models.token_classifier),
        params=prm.params_for_kind(prm.TOKEN_CLASSIFICATION, {}),
    )
    specs = SpecCache()
    model = CountingScorer(adapters.scorer_build(specs.spec(scorer_wire(spec, key="1@"))))
    loaded: list[str] = []

    def load(wire: dict[str, Any], deadline: float) -> Any:
        loaded.append(wire["key"])
        return model

    first = _request("a", spec, [RECORD, MESSAGES], deadline=2e9)
    second = _request("b", spec, [{"messages": MESSAGES, "id": "m"}], deadline=2e9)
    late = _request("c", spec, [RECORD], deadline=1.0)
    together = serve_batch([first, second, late], load=load)
    assert model.calls == [3]  # one call for both live requests; the late one is dropped
    assert set(together) == {"a", "b"}
    alone = serve_batch([_request("a", spec, [RECORD, MESSAGES], deadline=2e9)], load=load)
    assert close(together["a"]["steps"], alone["a"]["steps"])
    steps = together["a"]["steps"]
    assert steps[0][0] is None and all(0 < v < 1 for v in steps[0][1:])
    assert steps[1][:2] == [None, None] and all(0 < v < 1 for v in steps[1][2:])
    # The second request's run is the first request's second trajectory.
    assert close(together["b"]["steps"][0], steps[1])


def test_a_scorer_that_cannot_load_answers_each_of_its_requests_with_400() -> None:
    def load(wire: dict[str, Any], deadline: float) -> Any:
        raise prm.ScorerError("cannot load model '/nowhere'")

    spec = prm.ScorerSpec(
        kind=prm.TOKEN_CLASSIFICATION,
        model_ref="/nowhere",
        params=prm.params_for_kind(prm.TOKEN_CLASSIFICATION, {}),
    )
    answers = serve_batch(
        [_request("a", spec, [RECORD], 2e9), _request("b", spec, [RECORD], 2e9)], load=load
    )
    assert {a["status"] for a in answers.values()} == {400}
    assert "cannot load model '/nowhere'" in answers["a"]["error"]


def test_waiting_outlasts_the_redis_clients_socket_timeout() -> None:
    """An answer that comes after longer than the client's socket timeout (redis-py's
    default is 5 s, shorter than most deadlines) still reaches the waiting request."""
    import threading
    import uuid

    from django.conf import settings

    from scoring.rewards.channel import RewardChannel, redis_connect

    client = redis_connect(settings.CELERY_BROKER_URL, socket_timeout=0.3)
    channel = RewardChannel(client, prefix=f"test-wait-{uuid.uuid4().hex}:")
    answer_late = threading.Timer(1.0, channel.answer, ("r1", {"steps": [[0.5]]}))
    answer_late.start()
    try:
        assert channel.wait("r1", deadline=time.time() + 10) == {"steps": [[0.5]]}
    finally:
        answer_late.join()
    assert channel.wait("r2", deadline=time.time() + 0.5) is None


def test_a_local_judge_stays_loaded_whatever_each_pass_deadline(tiny_judge: Any) -> None:
    """The deadline shortens a remote judge's timeouts, never a local judge's parameters,
    which key its loaded model: a training run's passes load it once."""
    spec = JudgeSpec(str(tiny_judge), judge_params({"device": "cpu", "max_tokens": 4}))
    prompt = Prompt(DEFAULT_SYSTEM, DEFAULT_TEMPLATES[PER_STEP])
    wire = judge_wire(spec, prompt, key="judge:1", name="judge")
    load = model_loader()
    first, second = load(wire, time.time() + 5), load(wire, time.time() + 50)
    assert judge_load(first.spec) is judge_load(second.spec)  # type: ignore[attr-defined]
    remote = JudgeSpec(
        "m", judge_params({"backend": "remote", "base_url": "http://127.0.0.1:9/v1"})
    )
    soon = load(judge_wire(remote, prompt, key="judge:2", name="r"), time.time() + 5)
    assert soon.spec.params.timeout_seconds <= 5  # type: ignore[attr-defined]


def test_a_failing_judge_answers_502_placing_the_step_in_each_callers_own_batch() -> None:
    """The judge's error names the worker's keys for the pass (request b's second step
    is the pass's step 5); each caller reads its own positions, or that another request
    failed it."""
    spec = prm.ScorerSpec(
        kind=prm.TOKEN_CLASSIFICATION,
        model_ref="/unused",
        params=prm.params_for_kind(prm.TOKEN_CLASSIFICATION, {}),
    )

    def load(wire: dict[str, Any], deadline: float) -> Any:
        raise JudgeError("the endpoint failed for step 5 of trajectory 1; last: HTTP 500")

    requests = [_request("a", spec, [RECORD], 2e9), _request("b", spec, [RECORD], 2e9)]
    for request in requests:
        request["scorer"]["name"] = "strict"
    answers = serve_batch(requests, load=load)
    assert answers["b"] == {
        "error": "the judge 'strict' failed: the endpoint failed for trajectories.0 step 1;"
        " last: HTTP 500",
        "status": 502,
    }
    assert "for a trajectory of another request asked in the same pass" in answers["a"]["error"]
