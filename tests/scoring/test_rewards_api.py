"""The reward endpoints' refusals (web side only: each test has Redis keys of its own, with
no worker or a stand-in for one's heartbeat), and the whole path through a live HTTP
server and a real reward worker process."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from accounts.services import api_token_create
from scoring import prm
from scoring.models import Scorer, StepScore
from scoring.prm import adapters
from scoring.rewards.inputs import scorer_inputs, trajectories_parse
from scoring.services import scorer_spec
from scoring.services.rewards import reward_channel
from tests.factories import MembershipFactory, UserFactory
from tests.scoring.conftest import TinyModels
from trajectories.models import Membership, Project, Trajectory

RECORD = {
    "id": "r1",
    "task": "Janet has 16 eggs; she eats 3 and bakes with 4. She sells the rest at $2.",
    "steps": [
        {"content": "Step 1: 16 - 3 = 13 eggs remain."},
        {"content": "Step 2: 13 - 4 = 9 eggs to sell."},
        {"content": "The answer is 9 * 2 = 18 dollars."},
    ],
}
MESSAGES = [
    {"role": "user", "content": "Let x be such that 3x + 5 = 20."},
    {"role": "assistant", "content": "3x = 15."},
    {"role": "assistant", "content": "So x = 5."},
]


def api(user: User) -> APIClient:
    client = APIClient()
    _, secret = api_token_create(user=user, name=f"trainer {uuid.uuid4().hex}")
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    return client


@pytest.fixture
def researcher(project: Project) -> User:
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    return user


@pytest.fixture
def scorer(project: Project, make_scorer: Callable[..., Scorer]) -> Scorer:
    return make_scorer(prm.TOKEN_CLASSIFICATION, name="prm", project=project)


@pytest.fixture
def own_keys(settings: Any) -> Iterator[Any]:
    """Redis keys no worker serves: the test says whether one is alive."""
    settings.BROKER_KEY_PREFIX = f"test-rewards-{uuid.uuid4().hex}:"
    channel = reward_channel()
    yield channel
    channel.client.delete(channel.queue_key, channel.alive_key)


def post(user: User, **body: Any) -> Any:
    return api(user).post("/api/v1/rewards/", body, format="json")


def test_an_outsider_gets_404_and_an_unknown_scorer_is_named(
    project: Project, owner: User, outsider: User, scorer: Scorer
) -> None:
    body = {"project": project.slug, "scorer": "prm", "trajectories": [RECORD]}
    assert post(outsider, **body).status_code == 404
    refused = post(owner, **{**body, "scorer": "no-such-prm"})
    assert refused.status_code == 400
    assert refused.json() == {"scorer": ["no scorer 'no-such-prm' for project 'demo'"]}


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"trajectories": []}, "trajectories", "is empty"),
        (
            {"trajectories": [RECORD] * 3},
            "trajectories",
            "holds 3 trajectories; a request takes at most 2",
        ),
        ({"aggregate": "max"}, "aggregate", "not a valid choice"),
        ({"temperature": 1}, "temperature", "Unknown field"),
        ({"timeout": 9999}, "timeout", "the most is 600 s"),
        (
            {"trajectories": [RECORD, [{"role": "assistant"}, {"role": "robot", "content": ""}]]},
            "trajectories.1.messages.1.role",
            "'robot'",
        ),
        (
            {"trajectories": [{"messages": [{"role": "user", "content": ["x", 1]}]}]},
            "trajectories.0.messages.0.content.1",
            "got int",
        ),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    project: Project,
    owner: User,
    scorer: Scorer,
    settings: Any,
    change: Any,
    field: str,
    words: str,
) -> None:
    settings.STEPSCOPE_REWARDS_MAX_TRAJECTORIES = 2
    body = {"project": project.slug, "scorer": "prm", "trajectories": [RECORD], **change}
    refused = post(owner, **body)
    assert refused.status_code == 400, refused.json()
    errors = refused.json()
    named = [key for key in errors if key == field or key.startswith(field)]
    assert named, errors
    assert words in str(errors[named[0]])


def test_scorers_without_a_model_to_run_here_are_refused_by_name(
    project: Project, owner: User, tiny_models: TinyModels
) -> None:
    Scorer.objects.create(name="imported", kind=prm.EXTERNAL, project=project)
    Scorer.objects.create(
        name="head", kind=prm.TRAINED_HEAD, project=project, model_ref=str(tiny_models.encoder)
    )
    body = {"project": project.slug, "trajectories": [RECORD]}
    refused = post(owner, scorer="imported", **body)
    assert refused.status_code == 400
    assert "scorer 'imported' is of kind external" in refused.json()["scorer"][0]
    refused = post(owner, scorer="head", **body)
    assert refused.json() == {"scorer": ["head has no trained head yet"]}


def test_without_a_worker_or_past_the_queue_limit_the_answer_is_503_with_retry_after(
    project: Project, owner: User, scorer: Scorer, own_keys: Any, settings: Any
) -> None:
    body = {"project": project.slug, "scorer": "prm", "trajectories": [RECORD]}
    none = post(owner, **body)
    assert none.status_code == 503
    assert "no reward worker is running" in none.json()["detail"]
    assert none["Retry-After"] == "5"
    settings.STEPSCOPE_REWARDS_MAX_QUEUE = 2
    own_keys.beat()
    own_keys.client.rpush(own_keys.queue_key, "{}", "{}")
    full = post(owner, **body)
    assert full.status_code == 503
    assert "saturated: 2 requests wait (the limit is 2" in full.json()["detail"]
    assert full["Retry-After"] == "1"
    assert own_keys.depth() == 2  # nothing more was queued


def test_no_answer_within_the_deadline_is_a_504_saying_so(
    project: Project, owner: User, scorer: Scorer, own_keys: Any
) -> None:
    own_keys.beat()  # a worker that is alive but never gets to the request
    late = post(owner, project=project.slug, scorer="prm", trajectories=[RECORD], timeout=0.3)
    assert late.status_code == 504
    assert "no rewards within the deadline of 0.3 s" in late.json()["detail"]


def test_openrlhf_route_refuses_unknown_parameters_and_outsiders(
    project: Project, owner: User, outsider: User, scorer: Scorer
) -> None:
    url = "/api/v1/rewards/openrlhf/"
    body = {"query": ["q a"], "prompts": ["q "]}
    unknown = api(owner).post(f"{url}?project=demo&scorer=prm&temp=1", body, format="json")
    assert unknown.status_code == 400
    assert unknown.json() == {"temp": ["Unknown field."]}
    bad_body = api(owner).post(f"{url}?project=demo&scorer=prm", {"queries": []}, format="json")
    assert bad_body.json() == {"queries": ["Unknown field."]}
    hidden = api(outsider).post(f"{url}?project=demo&scorer=prm", body, format="json")
    assert hidden.status_code == 404


# --- Through a live server and a real reward worker ------------------------------------


def bare_values(scorer: Scorer, items: list[Any]) -> list[list[float | None]]:
    """What the scorer gives the same trajectories in this process, without the service."""
    # Step keys unique over the batch, as the worker gives them.
    inputs = [
        prm.TrajectoryInput(
            t.key, t.task, tuple(replace(s, key=t.key * 1000 + s.key) for s in t.steps)
        )
        for t in scorer_inputs(trajectories_parse(items))
    ]
    model = adapters.scorer_build(scorer_spec(scorer))
    by_key = {r.key: r.value for r in model.score(inputs)}
    return [[by_key.get(s.key) if s.score else None for s in t.steps] for t in inputs]


@pytest.mark.usefixtures("transactional_db")
def test_eight_concurrent_trainers_get_the_rewards_the_scorer_gives_and_store_them(
    live_server: Any,
    reward_worker: object,
    project: Project,
    owner: User,
    researcher: User,
    annotator: User,
    scorer: Scorer,
) -> None:
    _, token = api_token_create(user=researcher, name="trainer")
    expected = bare_values(scorer, [RECORD, MESSAGES])
    body = {
        "project": project.slug,
        "scorer": "prm",
        "trajectories": [RECORD, MESSAGES],
        "aggregate": "product",
        "credit": "prm-delta",
    }
    with httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Token {token}"}, timeout=120
    ) as http:

        def ask(_: int) -> httpx.Response:
            return http.post("/api/v1/rewards/", json=body)

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(ask, range(8)))
        for answer in answers:
            assert answer.status_code == 200, answer.text
            got = answer.json()
            assert (got["scorer"], got["revision"], got["aggregate"]) == ("prm", "", "product")
            for reward, values in zip(got["rewards"], expected, strict=True):
                assert reward["steps"] == pytest.approx(values, abs=1e-4)
                scored = [v for v in values if v is not None]
                product = 1.0
                for v in scored:
                    product *= v
                assert reward["reward"] == pytest.approx(product, abs=1e-4)
                assert len(reward["credits"]) == len(values)

        stored = http.post("/api/v1/rewards/", json={**body, "store": True})
        assert stored.status_code == 200, stored.text
        assert Trajectory.objects.filter(project=project).count() == 2
        scores = StepScore.objects.filter(scorer=scorer, step__trajectory__project=project)
        assert scores.count() == 5  # three record steps, two assistant turns
        kept = dict(
            scores.filter(step__trajectory__external_id="r1").values_list("step__index", "value")
        )
        assert [kept[i] for i in range(3)] == pytest.approx(expected[0], abs=1e-4)

    # Storing imports: annotators may score but not store.
    _, annotator_token = api_token_create(user=annotator, name="annotator")
    refused = httpx.post(
        f"{live_server.url}/api/v1/rewards/",
        json={**body, "store": True},
        headers={"Authorization": f"Token {annotator_token}"},
        timeout=60,
    )
    assert refused.status_code == 400
    assert "researcher or admin" in refused.json()["store"][0]
