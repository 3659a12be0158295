"""The client's reward helpers against a live Stepscope and a real reward worker, called
the way the trainers call them: verl's reward managers call ``compute_score`` (one
sample, ``NaiveRewardManager``) or ``compute_score_batch`` (``BatchRewardManager``) with
the config's ``reward_kwargs`` bound by ``functools.partial``; OpenRLHF's
``request_api_wrapper`` posts ``{"query", "prompts", "labels"}`` to ``--remote_rm_url``
with only a Content-Type header and reads ``rewards``. The scorer is a tiny PRM, or an
LLM judge behind the stand-in OpenAI-compatible endpoint (tests/scoring/openai_server.py)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
import requests
from stepscope_client.errors import StepscopeError
from stepscope_client.rewards import compute_score, compute_score_batch, openrlhf_url

from scoring import prm
from scoring.models import Scorer
from tests.conftest import OpenAIServer
from tests.scoring.test_judge_runs import remote_judge
from tests.scoring.test_rewards_api import bare_values
from trajectories.models import Project

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "Janet has 16 eggs; she eats 3 and bakes with 4. How much does she make at $2 each?"
SOLUTIONS = [
    "16 - 3 = 13 eggs remain.\n\n13 - 4 = 9 eggs to sell.\n\n9 * 2 = 18 dollars. #### 18",
    "16 - 3 - 4 = 8.\n\nThe answer is 8 * 2 = 16 dollars. #### 16",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from scoring.prm import tiny

    return tiny.save_token_classifier(tmp_path_factory.mktemp("reward-prm") / "prm")


@pytest.fixture
def scorer(project: Project, model_dir: Path) -> Scorer:
    return Scorer.objects.create(
        name="prm", kind=prm.TOKEN_CLASSIFICATION, project=project, model_ref=str(model_dir)
    )


def expected_min(scorer: Scorer, task: str, solution: str) -> float:
    steps = [{"content": piece.strip()} for piece in solution.split("\n\n")]
    values = bare_values(scorer, [{"id": "x", "task": task, "steps": steps}])[0]
    return min(v for v in values if v is not None)


def test_verl_reward_managers_get_each_responses_process_reward(
    live_server: Any, reward_worker: object, token: str, project: Project, scorer: Scorer
) -> None:
    reward_kwargs = {"url": live_server.url, "token": token, "project": "demo", "scorer": "prm"}
    naive = partial(compute_score, **reward_kwargs)
    score = naive(
        data_source="openai/gsm8k",
        solution_str=SOLUTIONS[0],
        ground_truth="18",
        extra_info={"split": "train", "index": 7, "question": QUESTION},
    )
    assert isinstance(score, float)
    assert score == pytest.approx(expected_min(scorer, QUESTION, SOLUTIONS[0]), abs=1e-4)

    batch = partial(compute_score_batch, **reward_kwargs)
    scores = batch(
        data_sources=["openai/gsm8k"] * 2,
        solution_strs=SOLUTIONS,
        ground_truths=["18", "18"],
        extra_infos=[{"index": 0, "question": QUESTION}, {"index": 1, "question": QUESTION}],
    )
    assert scores == pytest.approx([expected_min(scorer, QUESTION, s) for s in SOLUTIONS], abs=1e-4)
    assert scores[0] == pytest.approx(score, abs=1e-5)


def test_verl_reads_where_stepscope_is_from_the_environment(
    live_server: Any,
    reward_worker: object,
    token: str,
    project: Project,
    scorer: Scorer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in {
        "STEPSCOPE_URL": live_server.url,
        "STEPSCOPE_TOKEN": token,
        "STEPSCOPE_PROJECT": "demo",
        "STEPSCOPE_SCORER": "prm",
    }.items():
        monkeypatch.setenv(name, value)
    score = compute_score("openai/gsm8k", SOLUTIONS[1], "18", {"question": QUESTION})
    assert score == pytest.approx(expected_min(scorer, QUESTION, SOLUTIONS[1]), abs=1e-4)
    with pytest.raises(TypeError, match=r"unknown reward options \['scorrer'\]"):
        compute_score("openai/gsm8k", SOLUTIONS[1], "18", None, scorrer="prm")


def test_openrlhf_posts_its_remote_rm_body_to_the_url_and_reads_rewards(
    live_server: Any, reward_worker: object, token: str, project: Project, scorer: Scorer
) -> None:
    url = openrlhf_url(live_server.url, token, project="demo", scorer="prm", store=True)
    prompt = f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
    data = {
        "query": [prompt + solution for solution in SOLUTIONS],
        "prompts": [prompt, prompt],
        "labels": ["18", "18"],
    }
    # As openrlhf/utils/remote_rm_utils.py's request_api_wrapper sends it.
    response = requests.post(
        url=url, json=data, headers={"Content-Type": "application/json"}, timeout=180
    )
    response.raise_for_status()
    answer = response.json()
    assert "rewards" in answer
    assert answer["rewards"] == pytest.approx(
        [expected_min(scorer, prompt, s) for s in SOLUTIONS], abs=1e-4
    )
    # store=true: the rollouts are in the project, the label as their ground truth.
    stored = project.trajectories.order_by("external_id")
    assert [(t.task, t.ground_truth, t.step_count) for t in stored] == [
        (prompt, "18", 3),
        (prompt, "18", 2),
    ]
    wrong = requests.post(url=url.replace(token, "ssk_not-a-token"), json=data, timeout=30)
    assert wrong.status_code == 401


def test_a_judge_gives_verl_and_openrlhf_rewards_and_its_failure_is_an_error_not_a_zero(
    live_server: Any,
    reward_worker: object,
    token: str,
    project: Project,
    openai_server: OpenAIServer,
) -> None:
    remote_judge(project, openai_server, name="judge", logprobs=False, max_retries=0)
    # Every step "cannot be judged": 0.5 each, so a product tells the step counts apart.
    openai_server.control(fixed_reply="Hard to say. \\boxed{0}")
    reward_kwargs = {
        "url": live_server.url,
        "token": token,
        "project": "demo",
        "scorer": "judge",
        "aggregate": "product",
        "prompt_version": 1,
    }
    info = {"question": QUESTION}
    score = compute_score("openai/gsm8k", SOLUTIONS[0], "18", info, **reward_kwargs)
    assert score == pytest.approx(0.125)

    url = openrlhf_url(live_server.url, token, project="demo", scorer="judge", aggregate="product")
    prompt = f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
    data = {"query": [prompt + solution for solution in SOLUTIONS], "prompts": [prompt, prompt]}
    response = requests.post(
        url=url, json=data, headers={"Content-Type": "application/json"}, timeout=60
    )
    response.raise_for_status()
    answer = response.json()
    assert answer["rewards"] == pytest.approx([0.125, 0.25])
    assert answer["scores"] == [[0.5, 0.5, 0.5], [0.5, 0.5]]
    assert answer["revision"].startswith("tiny-judge#prompt-v1:")
    assert openai_server.stats()["requests"] == 3 + 5  # one call per step

    openai_server.control(reset=True)
    openai_server.control(fail=[500] * 5)
    with pytest.raises(StepscopeError) as failed:
        compute_score("openai/gsm8k", SOLUTIONS[1], "18", info, **reward_kwargs)
    assert failed.value.status == 502
    assert "the judge 'judge' failed" in str(failed.value)
