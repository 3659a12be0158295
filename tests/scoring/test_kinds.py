"""A scorer kind is one declaration (``scoring.prm.kinds``): registering it puts it in the
model's choices, the scorer form, the admin and the API's validation, with its own typed
parameters, and the services run it through the StepScorer it names."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User

from scoring import prm
from scoring.admin import ScorerForm
from scoring.forms import ScorerCreateForm
from scoring.models import Scorer
from scoring.prm import kinds
from scoring.prm.base import scorer_params
from scoring.services import ScoringError, scorer_create, scorer_spec
from tests.scoring.test_views_api import api
from trajectories.models import Project

NAME = "tagged-lm"


@pytest.fixture
def tagged_kind(monkeypatch: pytest.MonkeyPatch) -> Iterator[prm.ScorerKind]:
    """A kind declared only here: a step-tag LM whose tag is "<tag>" (removed after)."""
    kind = prm.ScorerKind(
        name=NAME,
        label="Tagged LM",
        parameters=lambda raw: scorer_params(raw, {"separator": "<tag>"}),
        build="scoring.prm.adapters:StepTagScorer",
        needs_model=f"a {NAME} scorer needs a model",
    )
    assert NAME not in dict(prm.kind_choices())
    monkeypatch.setitem(kinds._KINDS, NAME, kind)
    yield kind


def test_the_built_in_kinds_keep_their_order_and_labels() -> None:
    # The API schema's enum lists them so (docs/api.md and clients read it).
    assert prm.kind_choices() == [
        ("token-classification", "Token Classification"),
        ("step-tag-lm", "Step Tag Lm"),
        ("chat-turn-lm", "Chat Turn Lm"),
        ("sequence-classifier", "Sequence Classifier"),
        ("trained-head", "Trained Head"),
        ("external", "External"),
        ("llm-judge", "Llm Judge"),
    ]
    offered = [name for name, _ in ScorerCreateForm().fields["kind"].choices]  # type: ignore[attr-defined]
    assert offered == [
        "token-classification",
        "step-tag-lm",
        "chat-turn-lm",
        "sequence-classifier",
        "llm-judge",
    ]


def test_one_declaration_reaches_the_model_the_form_and_the_api(
    tagged_kind: prm.ScorerKind, project: Project, owner: User
) -> None:
    assert (NAME, "Tagged LM") in Scorer._meta.get_field("kind").choices  # type: ignore[operator]
    form = ScorerCreateForm(
        {"kind": NAME, "name": "tagged", "model_ref": "org/tagged", "queue": "gpu"}
    )
    assert (NAME, NAME) in form.fields["kind"].choices  # type: ignore[attr-defined]
    assert form.is_valid(), form.errors

    body = {"project": "demo", "name": "tagged", "kind": NAME, "model_ref": "org/tagged"}
    refused = api(owner).post(
        "/api/v1/scorers/", {**body, "parameters": {"separator": 3}}, format="json"
    )
    assert refused.status_code == 400
    assert "parameter 'separator' must be str" in refused.json()["detail"]
    unknown = api(owner).post(
        "/api/v1/scorers/", {**body, "parameters": {"tag": "x"}}, format="json"
    )
    assert "unknown scorer parameter 'tag'" in unknown.json()["detail"]
    missing = api(owner).post("/api/v1/scorers/", {**body, "model_ref": ""}, format="json")
    assert missing.json() == {"model_ref": f"a {NAME} scorer needs a model"}
    made = api(owner).post("/api/v1/scorers/", body, format="json")
    assert made.status_code == 201, made.content
    scorer = Scorer.objects.get(pk=made.json()["id"])
    assert scorer.kind == NAME and scorer.runs_a_model
    # Its defaults are its own, and a worker would load it as the StepScorer it names.
    spec = scorer_spec(scorer)
    assert spec.params.separator == "<tag>" and spec.revision == ""

    admin = ScorerForm(
        {
            "name": "tagged-admin",
            "kind": NAME,
            "model_ref": "org/tagged",
            "parameters": '{"batch_size": "4"}',
            "queue": "gpu",
        }
    )
    assert not admin.is_valid()
    assert "'batch_size' must be int" in admin.errors["parameters"][0]


def test_a_kind_not_registered_is_refused_everywhere(project: Project, owner: User) -> None:
    body = {"project": "demo", "name": "x", "kind": NAME, "model_ref": "org/x"}
    response = api(owner).post("/api/v1/scorers/", body, format="json")
    assert response.status_code == 400 and "kind" in response.json()
    assert not ScorerCreateForm({"kind": NAME, "name": "x", "model_ref": "m"}).is_valid()
    with pytest.raises(ScoringError, match=f"unknown scorer kind '{NAME}'"):
        scorer_create(name="x", kind=NAME, model_ref="org/x")
    assert not Scorer.objects.exists()


def test_a_prompt_is_for_kinds_with_prompt_versions(project: Project, owner: User) -> None:
    body = {"project": "demo", "name": "p", "kind": prm.TOKEN_CLASSIFICATION, "model_ref": "o/p"}
    response = api(owner).post("/api/v1/scorers/", {**body, "prompt": {}}, format="json")
    assert response.json() == {"prompt": "only an llm-judge has a prompt"}
    assert not Scorer.objects.exists()
