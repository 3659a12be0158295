"""Where models may be loaded from and whether they may run their own code: the one check
(scoring.prm.model_refs) as the API, the scorer form on the scoring page and the loaders
on the workers apply it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scoring import services
from scoring.models import JudgePrompt, Scorer, ScoringRun
from scoring.prm import adapters
from scoring.prm.model_refs import (
    ModelPolicy,
    ModelRefError,
    model_ref_resolve,
    remote_code_check,
)
from scoring.services.runners import scorer_spec
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.scoring.conftest import TinyModels
from trajectories.models import Membership, Project

HTMX = {"HX-Request": "true"}


@pytest.fixture
def models_dir(tmp_path: Path, settings: Any) -> Path:
    """The only model directory, for the test: tmp_path/models."""
    directory = tmp_path / "models"
    (directory / "prm").mkdir(parents=True)
    settings.STEPSCOPE_MODEL_DIRS = [directory]
    settings.STEPSCOPE_ALLOW_REMOTE_CODE = False
    return directory


# --- The check itself (Django-free) --------------------------------------------------------


def test_paths_inside_a_model_directory_resolve(tmp_path: Path) -> None:
    models = tmp_path / "models"
    (models / "prm" / "ckpt").mkdir(parents=True)
    policy = ModelPolicy(model_dirs=(models,))
    assert model_ref_resolve(str(models / "prm" / "ckpt"), policy) == str(models / "prm" / "ckpt")
    assert model_ref_resolve(str(models / "prm" / ".." / "prm"), policy) == str(models / "prm")
    # A bare name that exists under a model directory is that directory.
    assert model_ref_resolve("prm", policy) == str(models / "prm")
    # Otherwise it is a hub id, passed on untouched.
    assert model_ref_resolve("Qwen/Qwen2.5-Math-PRM-7B", policy) == "Qwen/Qwen2.5-Math-PRM-7B"


@pytest.mark.parametrize(
    "ref",
    ["/etc", "{models}/../secret", "{models}/prm/../../secret", "./prm", "prm/../../x", "~/m"],
)
def test_paths_outside_the_model_directories_are_refused(tmp_path: Path, ref: str) -> None:
    models = tmp_path / "models"
    (models / "prm").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    with pytest.raises(ModelRefError) as refused:
        model_ref_resolve(ref.format(models=models), ModelPolicy(model_dirs=(models,)))
    assert refused.value.field == "model_ref"
    assert str(models) in str(refused.value)


def test_a_symlink_out_of_a_model_directory_is_refused(tmp_path: Path) -> None:
    models, outside = tmp_path / "models", tmp_path / "outside"
    models.mkdir()
    outside.mkdir()
    (models / "escape").symlink_to(outside)
    (models / "inner").symlink_to(models)
    policy = ModelPolicy(model_dirs=(models,))
    with pytest.raises(ModelRefError, match=r"resolves to .*outside"):
        model_ref_resolve(str(models / "escape"), policy)
    # By name too: the name's directory resolves outside, so it is no local model, and
    # the hub id it would be is refused as a directory in the working directory only if
    # one exists there.
    assert model_ref_resolve("escape", policy) == "escape"
    assert model_ref_resolve(str(models / "inner"), policy) == str(models)


def test_a_hub_id_that_is_a_local_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "org" / "model").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelRefError, match="relative to the working directory"):
        model_ref_resolve("org/model", ModelPolicy(model_dirs=(tmp_path / "models",)))


def test_remote_code_needs_the_operator_setting() -> None:
    with pytest.raises(ModelRefError, match="STEPSCOPE_ALLOW_REMOTE_CODE") as refused:
        remote_code_check(True, ModelPolicy(model_dirs=()))
    assert refused.value.field == "trust_remote_code"
    remote_code_check(True, ModelPolicy(model_dirs=(), allow_remote_code=True))
    remote_code_check(False, ModelPolicy(model_dirs=()))


# --- The API -------------------------------------------------------------------------------


def api(user: User) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


BODY = {"project": "demo", "name": "prm", "kind": "token-classification"}


def test_the_api_refuses_a_model_outside_the_model_directories(
    project: Project, owner: User, models_dir: Path, tmp_path: Path
) -> None:
    outside = api(owner).post(
        "/api/v1/scorers/", {**BODY, "model_ref": str(tmp_path)}, format="json"
    )
    assert outside.status_code == 400
    assert "outside the model directories" in outside.json()["model_ref"]
    escape = api(owner).post(
        "/api/v1/scorers/", {**BODY, "model_ref": f"{models_dir}/../.."}, format="json"
    )
    assert escape.status_code == 400 and "model_ref" in escape.json()
    judge = api(owner).post(
        "/api/v1/scorers/",
        {**BODY, "kind": "llm-judge", "model_ref": "/etc/judge"},
        format="json",
    )
    assert judge.status_code == 400 and "model_ref" in judge.json()
    assert not Scorer.objects.exists() and not JudgePrompt.objects.exists()
    inside = api(owner).post(
        "/api/v1/scorers/", {**BODY, "model_ref": str(models_dir / "prm")}, format="json"
    )
    assert inside.status_code == 201, inside.content
    # A remote judge's model_ref is the endpoint's model name: no path rule applies.
    remote = api(owner).post(
        "/api/v1/scorers/",
        {
            **BODY,
            "name": "judge",
            "kind": "llm-judge",
            "model_ref": "gpt-4o-mini",
            "parameters": {"backend": "remote", "base_url": "http://127.0.0.1:9/v1"},
        },
        format="json",
    )
    assert remote.status_code == 201, remote.content


def test_the_api_refuses_remote_code_unless_the_operator_allows_it(
    project: Project, owner: User, models_dir: Path, settings: Any
) -> None:
    body = {**BODY, "model_ref": "Qwen/Qwen2.5-Math-PRM-7B", "trust_remote_code": True}
    refused = api(owner).post("/api/v1/scorers/", body, format="json")
    assert refused.status_code == 400
    assert "STEPSCOPE_ALLOW_REMOTE_CODE" in refused.json()["trust_remote_code"]
    staff = UserFactory.create(username="staff", is_staff=True)
    MembershipFactory.create(user=staff, project=project, role=Membership.Role.ADMIN)
    assert api(staff).post("/api/v1/scorers/", body, format="json").status_code == 400
    assert not Scorer.objects.exists()
    settings.STEPSCOPE_ALLOW_REMOTE_CODE = True
    # Allowed on the server, it still needs a staff account.
    assert api(owner).post("/api/v1/scorers/", body, format="json").status_code == 403
    allowed = api(staff).post("/api/v1/scorers/", body, format="json")
    assert allowed.status_code == 201, allowed.content
    assert Scorer.objects.get().trust_remote_code is True


# --- The form on the scoring page ----------------------------------------------------------


def browser(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_admin_adds_a_prm_scorer_from_the_scoring_page(
    project: Project, owner: User, models_dir: Path
) -> None:
    url = reverse("scorer-create", args=["demo"])
    page = browser(owner).get(reverse("scoring-section", args=["demo"]))
    assert url in page.content.decode()
    response = browser(owner).post(
        url,
        {"kind": "step-tag-lm", "name": "shepherd", "model_ref": "prm", "queue": "gpu-large"},
        headers=HTMX,
    )
    assert response.status_code == 200
    scorer = Scorer.objects.get()
    assert (scorer.project, scorer.kind, scorer.queue) == (project, "step-tag-lm", "gpu-large")
    assert scorer.model_ref == "prm" and scorer.created_by == owner
    assert not scorer.trust_remote_code
    html = response.content.decode()
    assert "Scorer <strong>shepherd</strong> added" in html
    # The new scorer is offered to the run form at once.
    assert re.search(rf'<option value="{scorer.pk}"[^>]*>shepherd</option>', html)


def test_an_admin_adds_a_remote_judge_from_the_scoring_page(
    project: Project, owner: User, models_dir: Path
) -> None:
    response = browser(owner).post(
        reverse("scorer-create", args=["demo"]),
        {
            "kind": "llm-judge",
            "name": "judge",
            "model_ref": "Qwen/Qwen2.5-7B-Instruct",
            "queue": "default",
            "backend": "remote",
            "mode": "trajectory",
            "base_url": "http://vllm.internal:8000/v1",
            "api_key_env": "JUDGE_KEY",
        },
        headers=HTMX,
    )
    assert response.status_code == 200
    judge = Scorer.objects.get(kind="llm-judge")
    assert judge.parameters == {
        "backend": "remote",
        "mode": "trajectory",
        "base_url": "http://vllm.internal:8000/v1",
        "api_key_env": "JUDGE_KEY",
    }
    assert judge.prompts.get().version == 1


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"model_ref": "/etc"}, "model_ref", "outside the model directories"),
        ({"model_ref": "prm/../../.."}, "model_ref", "neither a hub id"),
        ({"queue": "no spaces"}, "queue", "queue names are letters"),
        ({"kind": "llm-judge", "backend": "remote"}, "base_url", "needs its endpoint"),
        (
            {
                "kind": "llm-judge",
                "backend": "remote",
                "base_url": "http://x/v1",
                "api_key_env": "sk-secret key",
            },
            None,
            "NAME of an environment variable",
        ),
        ({"kind": "trained-head"}, "kind", "Select a valid choice"),
    ],
)
def test_bad_scorers_are_refused_on_the_page_naming_the_field(
    project: Project,
    owner: User,
    models_dir: Path,
    fields: dict[str, str],
    field: str | None,
    message: str,
) -> None:
    body = {"kind": "token-classification", "name": "x", "model_ref": "prm", "queue": "gpu",
            "backend": "local", "mode": "per-step", **fields}  # fmt: skip
    response = browser(owner).post(reverse("scorer-create", args=["demo"]), body, headers=HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    assert message in html.replace("&#x27;", "'")
    if field is not None:
        # The message sits in that field's box, which is open again.
        box = re.search(
            rf'<div class="scorer-field has-error">\s*<label for="id_scorer_{field}">.*?</div>',
            html,
            re.S,
        )
        assert box is not None and message in box.group(0).replace("&#x27;", "'")
    assert '<details class="scorer-add" id="scorer-add" open>' in html
    assert not Scorer.objects.exists()


def test_the_page_offers_remote_code_only_where_allowed_and_to_staff(
    project: Project, owner: User, models_dir: Path, settings: Any
) -> None:
    url = reverse("scoring-section", args=["demo"])
    assert "trust_remote_code" not in browser(owner).get(url).content.decode()
    # A forged field is not read when it is not offered.
    browser(owner).post(
        reverse("scorer-create", args=["demo"]),
        {"kind": "token-classification", "name": "x", "model_ref": "prm", "queue": "gpu",
         "backend": "local", "mode": "per-step", "trust_remote_code": "on"},
    )  # fmt: skip
    assert Scorer.objects.get().trust_remote_code is False
    settings.STEPSCOPE_ALLOW_REMOTE_CODE = True
    assert "trust_remote_code" not in browser(owner).get(url).content.decode()
    staff = UserFactory.create(username="staff", is_staff=True)
    MembershipFactory.create(user=staff, project=project, role=Membership.Role.ADMIN)
    assert 'name="trust_remote_code"' in browser(staff).get(url).content.decode()


def test_only_researchers_and_admins_add_scorers(
    project: Project, annotator: User, outsider: User, models_dir: Path
) -> None:
    url = reverse("scorer-create", args=["demo"])
    body = {"kind": "token-classification", "name": "x", "model_ref": "prm", "queue": "gpu",
            "backend": "local", "mode": "per-step"}  # fmt: skip
    assert browser(annotator).post(url, body).status_code == 403
    assert browser(outsider).post(url, body).status_code == 404
    assert (
        "scorer-add"
        not in browser(annotator).get(reverse("scoring-section", args=["demo"])).content.decode()
    )
    assert not Scorer.objects.exists()


# --- The loaders on the workers --------------------------------------------------------------


def test_the_loader_refuses_a_stored_model_outside_the_model_directories(
    project: Project, tiny_models: TinyModels, models_dir: Path, settings: Any
) -> None:
    """A scorer written past the services (an old row, the database by hand) still cannot
    load a directory outside the model directories: the worker's run fails saying why."""
    trajectory_with_steps(project, ["a", "b"])
    scorer = Scorer.objects.create(
        project=project,
        name="old",
        kind="token-classification",
        model_ref=str(tiny_models.token_classifier),
    )
    # Loaded once while the policy allowed its directory, it is still refused after: the
    # worker's model cache answers only what the policy allows now.
    settings.STEPSCOPE_MODEL_DIRS = [models_dir, tiny_models.token_classifier.parent]
    assert adapters.scorer_load(scorer_spec(scorer)) is not None
    settings.STEPSCOPE_MODEL_DIRS = [models_dir]
    run = services.scoring_run_start(project=project, scorer=scorer)
    services.scoring_run_plan(run_id=run.pk)
    chunk = run.chunks.first()
    assert chunk is not None
    with pytest.raises(ModelRefError):
        services.scoring_chunk_score(chunk_id=chunk.pk)
    run.refresh_from_db()
    assert run.status == ScoringRun.Status.FAILED
    assert "outside the model directories" in run.error


def test_the_loader_loads_inside_and_refuses_remote_code(
    tiny_models: TinyModels, settings: Any, tmp_path: Path
) -> None:
    from scoring.prm.adapters import load_tokenizer

    settings.STEPSCOPE_MODEL_DIRS = [tmp_path / "models"]
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "link").symlink_to(tiny_models.token_classifier)
    with pytest.raises(ModelRefError, match="outside"):
        load_tokenizer(str(tmp_path / "models" / "link"))
    settings.STEPSCOPE_MODEL_DIRS = [tiny_models.token_classifier.parent]
    assert load_tokenizer(str(tiny_models.token_classifier)) is not None
    with pytest.raises(ModelRefError, match="trust_remote_code is off"):
        load_tokenizer(str(tiny_models.token_classifier), trust_remote_code=True)


def test_created_scorers_still_score(
    project: Project, owner: User, tiny_models: TinyModels, settings: Any
) -> None:
    """The policy does not get in the way of a model where it belongs."""
    settings.STEPSCOPE_MODEL_DIRS = [tiny_models.token_classifier.parent]
    trajectory_with_steps(project, ["a", "b"])
    scorer = services.scorer_create(
        project=project,
        name="tiny",
        kind="token-classification",
        model_ref=tiny_models.token_classifier.name,
        parameters={"device": "cpu"},
    )
    run = services.scoring_run_start(project=project, scorer=scorer)
    services.scoring_run_plan(run_id=run.pk)
    for chunk in run.chunks.all():
        services.scoring_chunk_score(chunk_id=chunk.pk)
    run.refresh_from_db()
    assert run.status == ScoringRun.Status.DONE, run.error
    assert run.done == 2


def test_the_admin_form_refuses_what_the_api_refuses(project: Project, models_dir: Path) -> None:
    from scoring.admin import ScorerForm

    data = {"name": "x", "kind": "token-classification", "model_ref": "/etc", "revision": "",
            "parameters": "{}", "queue": "gpu", "project": project.pk}  # fmt: skip
    form = ScorerForm(data)
    assert not form.is_valid()
    assert "outside the model directories" in form.errors["model_ref"][0]
    form = ScorerForm({**data, "model_ref": "prm", "trust_remote_code": "on"})
    assert not form.is_valid()
    assert "STEPSCOPE_ALLOW_REMOTE_CODE" in form.errors["trust_remote_code"][0]
    assert ScorerForm({**data, "model_ref": "prm"}).is_valid()


def test_policies_get_the_same_check(project: Project, models_dir: Path) -> None:
    from rollouts.models import Policy
    from rollouts.services import RolloutError, policy_create

    with pytest.raises(RolloutError, match="outside the model directories"):
        policy_create(name="p", model_ref=f"{models_dir}/../..", project=project)
    with pytest.raises(RolloutError, match="trust_remote_code is off"):
        policy_create(name="p", model_ref="prm", project=project, trust_remote_code=True)
    assert not Policy.objects.exists()
    assert policy_create(name="p", model_ref="prm", project=project).model_ref == "prm"
