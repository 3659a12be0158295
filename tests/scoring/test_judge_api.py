"""Judges through the REST API: create one with its first prompt, add prompt versions
(never edit one), start a run with a chosen version; the key's NAME only, checked
placeholders, and members-only access."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from scoring.models import JudgePrompt, Scorer, ScoringRun
from tests.factories import trajectory_with_steps
from tests.scoring.conftest import JUDGE_KEY_ENV
from tests.scoring.test_views_api import api
from trajectories.models import Project

pytestmark = pytest.mark.django_db

REMOTE = {
    "backend": "remote",
    "base_url": "http://127.0.0.1:8000/v1",
    "api_key_env": JUDGE_KEY_ENV,
    "mode": "trajectory",
}


def create(user: User, **fields: object) -> object:
    body = {
        "project": "demo",
        "name": "judge",
        "kind": "llm-judge",
        "model_ref": "qwen2.5-7b-instruct",
        "parameters": REMOTE,
        "queue": "default",
        **fields,
    }
    return api(user).post("/api/v1/scorers/", body, format="json")


def test_a_judge_is_created_with_its_first_prompt_and_runs_with_a_chosen_version(
    project: Project, owner: User
) -> None:
    response = create(owner, prompt={"template": "Find the first wrong one of {steps}."})
    assert response.status_code == 201, response.content  # type: ignore[attr-defined]
    scorer = Scorer.objects.get(pk=response.json()["id"])  # type: ignore[attr-defined]
    assert scorer.kind == "llm-judge" and scorer.parameters["api_key_env"] == JUDGE_KEY_ENV
    assert scorer.prompts.get().template == "Find the first wrong one of {steps}."

    url = f"/api/v1/scorers/{scorer.pk}/prompts/"
    added = api(owner).post(
        url, {"template": "v2: {task}\n{steps}", "note": "stricter"}, format="json"
    )
    assert added.status_code == 201, added.content
    assert added.json()["version"] == 2
    listed = api(owner).get(url).json()
    assert [p["version"] for p in listed] == [2, 1]
    assert JudgePrompt.objects.get(scorer=scorer, version=1).template.startswith("Find")

    trajectory_with_steps(project, ["a", "b"])
    run = api(owner).post(
        "/api/v1/scoring-runs/",
        {"project": "demo", "scorer": "judge", "prompt_version": 1},
        format="json",
    )
    assert run.status_code == 201, run.content
    assert run.json()["prompt_version"] == 1
    stored = ScoringRun.objects.get(pk=run.json()["id"])
    assert stored.prompt is not None and stored.prompt.version == 1
    assert stored.metrics == {"mode": "trajectory", "prompt_version": 1}
    missing = api(owner).post(
        "/api/v1/scoring-runs/",
        {"project": "demo", "scorer": "judge", "prompt_version": 7},
        format="json",
    )
    assert missing.status_code == 400 and "no version 7" in missing.json()["scorer"]


def test_bad_judges_are_refused_naming_the_field(project: Project, owner: User) -> None:
    unknown = create(owner, prompt={"template": "{task} {history}"})
    assert unknown.status_code == 400  # type: ignore[attr-defined]
    assert "unknown placeholder {history} for mode 'trajectory'" in unknown.json()["detail"]  # type: ignore[attr-defined]
    key = create(owner, parameters={**REMOTE, "api_key_env": "sk-abc123 the key"})
    assert "NAME of an environment variable" in key.json()["detail"]  # type: ignore[attr-defined]
    not_a_judge = create(owner, kind="token-classification", prompt={"template": "x"})
    assert not_a_judge.json() == {"prompt": "only an llm-judge has a prompt"}  # type: ignore[attr-defined]
    assert not Scorer.objects.exists() and not JudgePrompt.objects.exists()


def test_annotators_read_prompts_but_do_not_add_them(
    project: Project, owner: User, annotator: User, outsider: User
) -> None:
    scorer_id = create(owner).json()["id"]  # type: ignore[attr-defined]
    url = f"/api/v1/scorers/{scorer_id}/prompts/"
    assert api(annotator).get(url).status_code == 200
    assert api(annotator).post(url, {"template": "{steps}"}, format="json").status_code == 403
    assert api(outsider).get(url).status_code == 404
    assert JudgePrompt.objects.filter(scorer_id=scorer_id).count() == 1


def test_an_attribution_judge_is_created_with_its_modes_default_prompt(
    project: Project, owner: User
) -> None:
    made = create(owner, parameters={**REMOTE, "mode": "binary-search"})
    assert made.status_code == 201, made.content  # type: ignore[attr-defined]
    prompt = Scorer.objects.get(name="judge").prompts.get()
    assert "{first_half}" in prompt.template and "Half: first" in prompt.template
    wrong = create(owner, name="other", parameters={**REMOTE, "mode": "all-at-once"},
                   prompt={"template": "{task} {steps}"})  # fmt: skip
    assert "unknown placeholder {steps} for mode 'all-at-once'" in wrong.json()["detail"]  # type: ignore[attr-defined]
    pattern = create(
        owner, name="third", parameters={**REMOTE, "mode": "step-by-step", "verdict_pattern": "(y)"}
    )
    assert pattern.status_code == 400  # type: ignore[attr-defined]
    assert "'verdict_pattern' is for the per-step and trajectory modes" in pattern.json()["detail"]  # type: ignore[attr-defined]
    assert Scorer.objects.count() == 1
