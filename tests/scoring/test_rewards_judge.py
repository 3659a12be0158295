"""An LLM judge as the reward service's scorer: refusals on the web side (no worker needed),
then the whole path through a live HTTP server, the session's real reward worker and the
stand-in OpenAI-compatible endpoint (tests/scoring/openai_server.py)."""

from __future__ import annotations

import hashlib
import json
import socket
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User

from accounts.services import api_token_create
from scoring import prm, services
from scoring.judges.config import DEFAULT_SYSTEM, DEFAULT_TEMPLATES, PER_STEP
from scoring.models import Scorer, ScoringRun, StepScore
from tests.scoring.conftest import JUDGE_NAME, OpenAIServer
from tests.scoring.test_judge_runs import remote_judge
from tests.scoring.test_rewards_api import MESSAGES, RECORD, post
from tests.waiting import wait_until
from trajectories.models import Project

# What the stand-in judge answers for each step of RECORD and MESSAGES, whatever order
# the concurrent requests come in: right, wrong, cannot tell, right, no verdict at all.
REPLIES = [
    {"contains": "(step 0):\nStep 1: 16 - 3", "reply": "Subtracts well. \\boxed{+1}"},
    {"contains": "(step 1):\nStep 2: 13 - 4", "reply": "Fine so far. \\boxed{-1}"},
    {"contains": "(step 2):\nThe answer is", "reply": "Hard to say. \\boxed{0}"},
    {"contains": "(step 1):\n3x = 15.", "reply": "Yes. \\boxed{+1}"},
    {"contains": "(step 2):\nSo x = 5.", "reply": "I would rather not say."},
]
# RECORD: +1, -1, 0; MESSAGES: a user turn (not scored), +1, no readable verdict.
EXPECTED_STEPS = [[1.0, 0.0, 0.5], [None, 1.0, None]]


def judge(project: Project, server: OpenAIServer, **raw: Any) -> Scorer:
    # No log-probabilities: the stand-in's fixed replies carry none worth reading. No
    # retries: a failure is a failure at once.
    return remote_judge(
        project, server, name="judge", logprobs=False, max_retries=0, concurrency=2, **raw
    )


def test_refusals_name_the_scorer_and_the_field(
    project: Project, owner: User, openai_server: OpenAIServer, make_scorer: Any
) -> None:
    body = {"project": project.slug, "trajectories": [RECORD]}
    Scorer.objects.create(name="imported", kind=prm.EXTERNAL, project=project)
    external = post(owner, scorer="imported", **body)
    assert external.status_code == 400
    message = external.json()["scorer"][0]
    assert "scorer 'imported' is of kind external" in message
    assert "imported" in message and "a PRM, a trained head or an llm-judge" in message

    remote_judge(project, openai_server, name="who", mode="all-at-once")
    attribution = post(owner, scorer="who", **body)
    assert attribution.status_code == 400
    assert "judge 'who' is in mode all-at-once" in attribution.json()["scorer"][0]

    judge(project, openai_server)
    missing = post(owner, scorer="judge", prompt_version=9, **body)
    assert missing.json() == {"prompt_version": ["judge has no version 9"]}

    make_scorer(prm.TOKEN_CLASSIFICATION, name="prm", project=project)
    not_a_judge = post(owner, scorer="prm", prompt_version=1, **body)
    assert not_a_judge.status_code == 400
    assert "only an llm-judge asks with a prompt version" in not_a_judge.json()["prompt_version"][0]


@pytest.mark.usefixtures("transactional_db")
def test_a_judge_scores_each_step_concurrently_and_stores_them_as_its_scores(
    live_server: Any,
    reward_worker: object,
    openai_server: OpenAIServer,
    project: Project,
    owner: User,
) -> None:
    scorer = judge(project, openai_server)
    openai_server.control(replies_for=REPLIES, delay=0.2)
    _, token = api_token_create(user=owner, name="trainer")
    body = {
        "project": project.slug,
        "scorer": "judge",
        "trajectories": [RECORD, MESSAGES],
        "aggregate": "mean",
        "store": True,
    }
    answer = httpx.post(
        f"{live_server.url}/api/v1/rewards/",
        json=body,
        headers={"Authorization": f"Token {token}"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    got = answer.json()
    assert [r["steps"] for r in got["rewards"]] == EXPECTED_STEPS
    assert [r["reward"] for r in got["rewards"]] == pytest.approx([0.5, 1.0])
    digest = hashlib.sha256(
        json.dumps([DEFAULT_SYSTEM, DEFAULT_TEMPLATES[PER_STEP]]).encode()
    ).hexdigest()
    assert got["judge"] == {
        "revision": f"{JUDGE_NAME}#prompt-v1:{digest[:12]}",
        "model": JUDGE_NAME,
        "model_revision": "",
        "mode": "per-step",
        "prompt_version": 1,
        "prompt_sha256": digest,
    }
    assert got["revision"] == got["judge"]["revision"]
    stats = openai_server.stats()
    # One call per scored step, at most the judge's concurrency of 2 in flight, and more
    # than one: the calls overlap.
    assert stats["requests"] == 5
    assert stats["max_in_flight"] == 2

    # Stored as the judge's scores, by a run that records the prompt version.
    scores = StepScore.objects.filter(scorer=scorer, step__trajectory__project=project)
    by_step = {
        (external_id, index): value
        for external_id, index, value in scores.values_list(
            "step__trajectory__external_id", "step__index", "value"
        )
    }
    assert {k: v for k, v in by_step.items() if k[0] == "r1"} == {
        ("r1", 0): 1.0,
        ("r1", 1): 0.0,
        ("r1", 2): 0.5,
    }
    assert sorted(v for k, v in by_step.items() if k[0] != "r1") == [1.0]  # no 0 for "no verdict"
    run = ScoringRun.objects.get(scorer=scorer)
    assert run.prompt is not None and run.prompt.version == 1
    assert got["stored"]["scores"] == 4


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.usefixtures("transactional_db")
def test_a_judge_past_the_deadline_is_a_504_and_a_failing_endpoint_a_502_naming_it(
    live_server: Any,
    reward_worker: object,
    openai_server: OpenAIServer,
    project: Project,
    owner: User,
) -> None:
    judge(project, openai_server)
    services.judge_create(
        name="nowhere",
        model_ref=JUDGE_NAME,
        project=project,
        parameters={"backend": "remote", "base_url": f"http://127.0.0.1:{_closed_port()}/v1"},
    )
    _, token = api_token_create(user=owner, name="trainer")
    body = {"project": project.slug, "scorer": "judge", "trajectories": [RECORD]}
    with httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Token {token}"}, timeout=60
    ) as http:
        openai_server.control(fixed_reply="\\boxed{+1}", delay=1.0)
        late = http.post("/api/v1/rewards/", json={**body, "timeout": 0.5})
        assert late.status_code == 504, late.text
        assert "no rewards within the deadline of 0.5 s" in late.json()["detail"]
        # The stand-in's late answers are done before it is reset (they would count as
        # leaving a later test's calls).
        assert wait_until(lambda: openai_server.stats()["in_flight"] == 0, 10)

        openai_server.control(reset=True)
        openai_server.control(fail=[500, 500, 500])
        failed = http.post("/api/v1/rewards/", json=body)
        assert failed.status_code == 502, failed.text
        detail = failed.json()["detail"]
        assert detail.startswith("the judge 'judge' failed: the judge endpoint")
        assert "HTTP 500: injected" in detail
        assert "for trajectories.0 step " in detail  # the caller's position, not the pass's

        unreachable = http.post("/api/v1/rewards/", json={**body, "scorer": "nowhere"})
        assert unreachable.status_code == 502, unreachable.text
        assert (
            "the judge 'nowhere' failed: cannot reach the judge endpoint"
            in (unreachable.json()["detail"])
        )

        # The worker goes on serving once the endpoint answers again.
        openai_server.control(reset=True)
        openai_server.control(fixed_reply="\\boxed{+1}")
        again = http.post("/api/v1/rewards/", json=body)
        assert again.status_code == 200, again.text
        assert again.json()["rewards"][0]["steps"] == [1.0, 1.0, 1.0]
