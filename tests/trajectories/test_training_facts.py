"""Training facts (policy version, training step, logprob summary, advantage, return)
through the whole path: a Stepscope file's ``training`` objects land in the step and
trajectory columns by COPY, the API serves them, and the trajectory page shows them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from trajectories.models import Project, Step, Trajectory
from trajectories.services import trajectory_import

pytestmark = pytest.mark.django_db

RECORD = {
    "id": "rollout-0",
    "task": "What is 2 + 3 * 4?",
    "task_key": "arith-7",
    "training": {"policy_version": "global_step_3", "training_step": 3},
    "steps": [
        {"role": "user", "content": "What is 2 + 3 * 4?"},
        {
            "content": "3 * 4 = 12, so 14.",
            "training": {
                "policy_version": "global_step_3",
                "training_step": 3,
                "logprob_sum": -2.5,
                "logprob_mean": -0.625,
                "logprob_min": -1.5,
                "advantage": 0.75,
                "returns": 1.0,
                "token_logprobs": [-0.5, -0.25, -0.25, -1.5],
            },
        },
    ],
}


def imported(project: Project, tmp_path: Path) -> Trajectory:
    path = tmp_path / "rl.jsonl"
    path.write_text(json.dumps(RECORD) + "\n")
    batch = trajectory_import(project=project, source_format="stepscope", path=path)
    assert batch.created_count == 1
    return Trajectory.objects.get(project=project)


def test_facts_land_in_their_columns(project: Project, tmp_path: Path) -> None:
    trajectory = imported(project, tmp_path)
    assert (trajectory.policy_version, trajectory.training_step) == ("global_step_3", 3)
    prompt, answer = Step.objects.filter(trajectory=trajectory).order_by("index")
    assert not prompt.has_training
    assert (prompt.policy_version, prompt.advantage, prompt.token_logprobs) == ("", None, None)
    assert answer.has_training
    assert (
        answer.policy_version,
        answer.training_step,
        answer.logprob_sum,
        answer.logprob_mean,
        answer.logprob_min,
        answer.advantage,
        answer.returns,
        answer.token_logprobs,
    ) == ("global_step_3", 3, -2.5, -0.625, -1.5, 0.75, 1.0, [-0.5, -0.25, -0.25, -1.5])


def test_api_serves_the_facts(project: Project, annotator: User, tmp_path: Path) -> None:
    trajectory = imported(project, tmp_path)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=annotator).key}")
    listed = api.get("/api/v1/trajectories/", {"project": project.slug}).json()["results"]
    assert (listed[0]["policy_version"], listed[0]["training_step"]) == ("global_step_3", 3)
    steps = api.get("/api/v1/steps/", {"trajectory": trajectory.pk}).json()["results"]
    assert steps[0]["advantage"] is None
    assert (steps[1]["advantage"], steps[1]["returns"], steps[1]["logprob_min"]) == (
        0.75,
        1.0,
        -1.5,
    )


def test_trajectory_page_shows_the_facts_compactly(
    project: Project, annotator: User, tmp_path: Path
) -> None:
    trajectory = imported(project, tmp_path)
    client = Client()
    client.force_login(annotator)
    html = client.get(reverse("trajectory-detail", args=[trajectory.pk])).content.decode()
    assert html.count('class="step-training mono"') == 1
    assert "adv 0.750" in html
    assert "ret 1.000" in html
    assert "logp μ -0.625 min -1.50 Σ -2.50" in html
    assert "policy global_step_3" in html
    assert "train step 3" in html
    # The rollout's own policy version and training step, in the page's header.
    assert '<dt>Policy</dt><dd class="mono">global_step_3</dd>' in html
    assert "<dt>Training step</dt><dd>3</dd>" in html
