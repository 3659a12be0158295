"""Attribution on the pages and the REST API: who may see, start and cancel; the project
page's form and live rows; the trajectory page's scores, credits, strips, run picker and
first-error flags, in a constant number of queries; token saliency on demand."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from labeling.models import StepLabel
from scoring import prm, services
from scoring.models import AttributionRun, Scorer, ScoringRun, StepCredit, StepScore
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.scoring.test_attribution_runs import make_rollouts, run_to_completion
from trajectories.models import Membership, Project, Trajectory
from trajectories.services import imported_annotator

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def api(user: User) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def browser(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def scored(
    project: Project, trajectories: list[Trajectory], values: list[list[float]], name: str = "ext"
) -> Scorer:
    """An external scorer with the given step scores, finished as a scoring run would."""
    scorer = Scorer.objects.create(project=project, name=name, kind=prm.EXTERNAL, queue="default")
    for trajectory, row in zip(trajectories, values, strict=True):
        for step, value in zip(trajectory.steps.order_by("index"), row, strict=True):
            StepScore.objects.create(step=step, scorer=scorer, value=value)
    ScoringRun.objects.create(
        project=project, scorer=scorer, kind=ScoringRun.Kind.IMPORT, status="done"
    )
    return scorer


@pytest.fixture
def rollouts(project: Project) -> dict[str, Trajectory]:
    return make_rollouts(project)


@pytest.fixture
def scorer(project: Project, rollouts: dict[str, Trajectory]) -> Scorer:
    values = {"A": [0.9, 0.6, 0.2], "B": [0.9, 0.8, 0.7], "C": [0.9, 0.4], "E": [0.8, 0.7]}
    return scored(project, [rollouts[k] for k in values], list(values.values()))


@pytest.fixture
def runs(project: Project, scorer: Scorer) -> dict[str, AttributionRun]:
    return {
        "delta": run_to_completion(
            services.attribution_run_start(project=project, method="prm-delta", scorer=scorer)
        ),
        "mc": run_to_completion(
            services.attribution_run_start(project=project, method="mc-prefix")
        ),
    }


def evidence(client: Client, trajectory: Trajectory, **params: Any) -> str:
    url = reverse("trajectory-evidence", args=[trajectory.pk])
    response = client.get(url, {"part": "top", **params}, headers=HTMX)
    assert response.status_code == 200
    return response.content.decode()


def columns(client: Client, trajectory: Trajectory, **params: Any) -> str:
    url = reverse("trajectory-evidence", args=[trajectory.pk])
    response = client.get(url, {"part": "columns", **params}, headers=HTMX)
    assert response.status_code == 200
    return response.content.decode()


# --- REST ----------------------------------------------------------------------------------


def test_owner_starts_and_reads_a_run_through_the_api(
    project: Project, owner: User, rollouts: dict[str, Trajectory], scorer: Scorer
) -> None:
    response = api(owner).post(
        "/api/v1/attribution-runs/",
        {"project": "demo", "method": "gae", "scorer": "ext", "parameters": {"lam": 0.5}},
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "queued" and body["scorer_name"] == "ext"
    assert body["parameters"] == {"gamma": 1.0, "lam": 0.5}
    run = run_to_completion(AttributionRun.objects.get(pk=body["id"]))
    detail = api(owner).get(f"/api/v1/attribution-runs/{run.pk}/").json()
    assert detail["status"] == "done" and detail["done"] == 10
    credits = api(owner).get(f"/api/v1/attribution-runs/{run.pk}/credits/").json()
    assert len(credits["results"]) == 10
    first = credits["results"][0]
    assert {"step", "trajectory", "index", "value", "level"} <= set(first)
    listed = api(owner).get("/api/v1/attribution-runs/", {"project": "demo", "method": "gae"})
    assert [r["id"] for r in listed.json()["results"]] == [run.pk]


def test_api_refusals_are_400(
    project: Project, owner: User, rollouts: dict[str, Trajectory]
) -> None:
    client = api(owner)
    for payload in (
        {"project": "demo", "method": "prm-delta"},
        {"project": "demo", "method": "gae", "scorer": "nope"},
        {"project": "demo", "method": "returns", "parameters": {"gamma": 3}},
        {"project": "demo", "method": "token-saliency", "scorer": "x", "step": 999999},
    ):
        response = client.post("/api/v1/attribution-runs/", payload, format="json")
        assert response.status_code == 400, (payload, response.content)


def test_annotators_may_read_but_not_start_or_cancel(
    project: Project, annotator: User, runs: dict[str, AttributionRun]
) -> None:
    client = api(annotator)
    assert client.get("/api/v1/attribution-runs/").json()["results"]
    run = runs["delta"]
    assert client.get(f"/api/v1/attribution-runs/{run.pk}/credits/").status_code == 200
    response = client.post(
        "/api/v1/attribution-runs/", {"project": "demo", "method": "mc-prefix"}, format="json"
    )
    assert response.status_code == 403
    assert client.post(f"/api/v1/attribution-runs/{run.pk}/cancel/").status_code == 403


def test_cancel_through_the_api(
    project: Project, owner: User, rollouts: dict[str, Trajectory]
) -> None:
    run = services.attribution_run_start(project=project, method="mc-prefix")
    response = api(owner).post(f"/api/v1/attribution-runs/{run.pk}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"


def test_outsiders_get_404_everywhere(
    project: Project,
    outsider: User,
    rollouts: dict[str, Trajectory],
    runs: dict[str, AttributionRun],
) -> None:
    run = runs["delta"]
    step = rollouts["A"].steps.get(index=0)
    client = api(outsider)
    assert client.get("/api/v1/attribution-runs/").json()["results"] == []
    for url in (
        f"/api/v1/attribution-runs/{run.pk}/",
        f"/api/v1/attribution-runs/{run.pk}/credits/",
    ):
        assert client.get(url).status_code == 404, url
    assert client.post(f"/api/v1/attribution-runs/{run.pk}/cancel/").status_code == 404
    response = client.post(
        "/api/v1/attribution-runs/", {"project": "demo", "method": "mc-prefix"}, format="json"
    )
    assert response.status_code == 404
    page = browser(outsider)
    gets = [
        reverse("attribution-run-row", args=[run.pk]),
        reverse("trajectory-evidence", args=[rollouts["A"].pk]),
        reverse("step-saliency", args=[step.pk]),
    ]
    posts = [
        reverse("attribution-run-start", args=["demo"]),
        reverse("attribution-run-cancel", args=[run.pk]),
        reverse("step-saliency", args=[step.pk]),
    ]
    for url in gets:
        assert page.get(url, headers=HTMX).status_code == 404, url
    for url in posts:
        assert page.post(url, {"method": "mc-prefix"}, headers=HTMX).status_code == 404, url


def test_schema_lists_the_attribution_endpoints(annotator: User) -> None:
    schema = api(annotator).get("/api/v1/schema/").content.decode()
    assert "/api/v1/attribution-runs/" in schema and "credits" in schema


# --- The project page's scoring section ----------------------------------------------------


def test_owner_attributes_from_the_project_page(
    project: Project, owner: User, rollouts: dict[str, Trajectory], scorer: Scorer
) -> None:
    client = browser(owner)
    section = client.get(reverse("scoring-section", args=["demo"]), headers=HTMX).content.decode()
    assert "Attribute credit" in section and 'name="method"' in section
    response = client.post(
        reverse("attribution-run-start", args=["demo"]),
        {"method": "returns", "scorer": scorer.pk, "gamma": "0.9"},
        headers=HTMX,
    )
    assert response.status_code == 200
    run = AttributionRun.objects.get()
    assert run.method == "returns" and run.parameters == {"gamma": 0.9} and run.scorer == scorer
    html = response.content.decode()
    assert f'id="attribution-run-{run.pk}"' in html and 'hx-trigger="every 2s"' in html
    cancel = reverse("attribution-run-cancel", args=[run.pk])
    assert cancel in html
    # Errors come back in the section.
    bad = client.post(
        reverse("attribution-run-start", args=["demo"]),
        {"method": "prm-delta", "extra": "initial=abc"},
        headers=HTMX,
    ).content.decode()
    assert "needs a scorer" in bad or "must be a number" in bad


def test_progress_row_polls_until_the_run_ends_and_cancels(
    project: Project, owner: User, rollouts: dict[str, Trajectory]
) -> None:
    client = browser(owner)
    run = services.attribution_run_start(project=project, method="group-relative")
    row = client.get(reverse("attribution-run-row", args=[run.pk]), headers=HTMX).content.decode()
    assert 'hx-trigger="every 2s"' in row and "Cancel" in row
    run_to_completion(run)
    row = client.get(reverse("attribution-run-row", args=[run.pk]), headers=HTMX).content.decode()
    assert "every 2s" not in row and "done" in row and "maths" in row
    other = services.attribution_run_start(project=project, method="mc-prefix")
    cancelled = client.post(reverse("attribution-run-cancel", args=[other.pk]), headers=HTMX)
    assert "cancelled" in cancelled.content.decode()


def test_annotator_sees_runs_but_cannot_start_them(
    project: Project, annotator: User, runs: dict[str, AttributionRun]
) -> None:
    client = browser(annotator)
    section = client.get(reverse("scoring-section", args=["demo"]), headers=HTMX).content.decode()
    assert f'id="attribution-run-{runs["delta"].pk}"' in section
    assert "Attribute credit" not in section
    start = client.post(reverse("attribution-run-start", args=["demo"]), {"method": "mc-prefix"})
    assert start.status_code == 403
    cancel = client.post(reverse("attribution-run-cancel", args=[runs["delta"].pk]))
    assert cancel.status_code == 403


# --- The trajectory page ---------------------------------------------------------------------


def credit_cells(html: str) -> list[str]:
    strip = html.split('id="credit-strip"')[1].split("</div>")[0]
    return re.findall(r'title="step \d+: ([^"]+)"', strip)


def test_trajectory_page_loads_scores_and_credits(
    project: Project, owner: User, rollouts: dict[str, Trajectory], runs: dict[str, AttributionRun]
) -> None:
    client = browser(owner)
    a = rollouts["A"]
    page = client.get(reverse("trajectory-detail", args=[a.pk])).content.decode()
    top_url = reverse("trajectory-evidence", args=[a.pk]) + "?part=top"
    assert f'hx-get="{top_url}"' in page
    assert f'id="step-evidence-{a.steps.get(index=0).pk}"' in page
    assert "part=columns&amp;from=0" in page

    top = evidence(client, a)
    # PRM strip (the external scorer's values), MC strip and the newest run's credits.
    assert 'id="score-strip"' in top and 'id="mc-strip"' in top
    assert "step 2: 0.200" in top.split('id="score-strip"')[1]
    assert credit_cells(top) == ["+0.000", "-0.167", "-0.500"]  # mc-prefix is the newest
    assert f'<option value="{runs["delta"].pk}"' in top
    # The picked run's credits.
    picked = evidence(client, a, credit=runs["delta"].pk)
    assert credit_cells(picked) == ["-0.100", "-0.300", "-0.400"]
    # First errors: the PRM drops under 0.5 at step 2; no rollout through step 2 succeeds.
    assert "PRM · step 2" in top and "MC · step 2" in top

    cols = columns(client, a, **{"from": 0})
    first = a.steps.get(index=0)
    assert f'id="step-evidence-{first.pk}" hx-swap-oob="true"' in cols
    assert cols.count("hx-swap-oob") == 3
    assert "+0.000" in cols
    # Imported scores have no model to explain: no token saliency link.
    assert reverse("step-saliency", args=[first.pk]) not in cols
    only_second = columns(client, a, **{"from": 1, "to": 2})
    assert only_second.count("hx-swap-oob") == 1


def test_a_saved_label_row_loads_its_own_column_with_the_picked_run(
    project: Project, owner: User, rollouts: dict[str, Trajectory], runs: dict[str, AttributionRun]
) -> None:
    client = browser(owner)
    a = rollouts["A"]
    step = a.steps.get(index=1)
    schema = project.label_schemas.get()
    response = client.post(
        reverse("step-label", args=[step.pk]), {"schema": schema.pk, "value": -1}, headers=HTMX
    ).content.decode()
    column_url = reverse("trajectory-evidence", args=[a.pk]) + f"?part=step&amp;step={step.pk}"
    assert column_url in response and 'hx-trigger="load"' in response
    page_url = "http://testserver" + reverse("trajectory-detail", args=[a.pk])
    column = client.get(
        reverse("trajectory-evidence", args=[a.pk]),
        {"part": "step", "step": str(step.pk)},
        headers={**HTMX, "HX-Current-URL": f"{page_url}?credit={runs['delta'].pk}"},
    ).content.decode()
    assert column.lstrip().startswith("<aside")
    assert "-0.300" in column and "hx-swap-oob" not in column
    # The owner's label is now a first error too.
    assert "1st error · owner" in column


def test_label_first_errors_respect_blind_labeling(
    project: Project, owner: User, annotator: User, rollouts: dict[str, Trajectory]
) -> None:
    a = rollouts["A"]
    source = imported_annotator("prm800k")
    StepLabel.objects.create(
        step=a.steps.get(index=1), annotator=source, schema=project.label_schemas.get(), value=-1
    )
    assert "import:prm800k · step 1" in evidence(browser(owner), a)
    project.settings = {"blind_labeling": True}
    project.save()
    assert "import:prm800k" not in evidence(browser(annotator), a)


def test_hidden_model_scores_stay_hidden_from_annotators(
    project: Project,
    owner: User,
    annotator: User,
    rollouts: dict[str, Trajectory],
    runs: dict[str, AttributionRun],
) -> None:
    project.settings = {"hide_model_scores": True}
    project.save()
    a = rollouts["A"]
    client = browser(annotator)
    top = evidence(client, a)
    assert "score-strip" not in top and "credit-strip" not in top and "PRM ·" not in top
    cols = columns(client, a)
    assert "PRM" not in cols and "+0" not in cols and "-0" not in cols
    step = a.steps.get(index=0)
    assert client.get(reverse("step-saliency", args=[step.pk]), headers=HTMX).status_code == 403
    # Researchers and admins still see them.
    assert "score-strip" in evidence(browser(owner), a)


def test_evidence_page_without_javascript(
    project: Project, owner: User, rollouts: dict[str, Trajectory], runs: dict[str, AttributionRun]
) -> None:
    html = browser(owner).get(reverse("trajectory-evidence", args=[rollouts["A"].pk])).content
    text = html.decode()
    assert "<html" in text and 'id="credit-strip"' in text and "evidence-table" in text


def test_trajectory_page_shows_scores_and_credits_in_constant_queries(
    project: Project, owner: User
) -> None:
    short = trajectory_with_steps(project, ["a", "b"], task_key="q", success=True)
    long = trajectory_with_steps(
        project, [f"step {n} " * 20 for n in range(300)], task_key="q", success=False
    )
    scorer = scored(project, [short, long], [[0.5, 0.4], [0.9 - n / 400 for n in range(300)]])
    for method in ("prm-delta", "mc-prefix"):
        run_to_completion(
            services.attribution_run_start(
                project=project, method=method, scorer=scorer if method == "prm-delta" else None
            )
        )
    StepCredit.objects.filter(step__trajectory=long).update(value=0.25)
    client = browser(owner)
    counts: dict[str, list[int]] = {"page": [], "top": [], "columns": []}
    for trajectory in (short, long):
        with CaptureQueriesContext(connection) as queries:
            client.get(reverse("trajectory-detail", args=[trajectory.pk]))
        counts["page"].append(len(queries))
        with CaptureQueriesContext(connection) as queries:
            top = evidence(client, trajectory)
        counts["top"].append(len(queries))
        with CaptureQueriesContext(connection) as queries:
            cols = columns(client, trajectory, **{"from": 0})
        counts["columns"].append(len(queries))
        assert "score-strip" in top and "credit-strip" in top
        assert cols.count("hx-swap-oob") == trajectory.step_count
    assert all(a == b for a, b in counts.values()), counts
    assert counts["page"][0] <= 5 and counts["top"][0] <= 4 and counts["columns"][0] <= 4


# --- Token saliency on demand --------------------------------------------------------------


def test_saliency_needs_a_model_scorer_and_the_researcher_role(
    project: Project, owner: User, annotator: User, rollouts: dict[str, Trajectory], scorer: Scorer
) -> None:
    step = rollouts["A"].steps.get(index=0)
    url = reverse("step-saliency", args=[step.pk])
    html = browser(annotator).get(url, headers=HTMX).content.decode()
    assert "a researcher can compute it" in html
    assert browser(annotator).post(url, headers=HTMX).status_code == 403
    # The page's scorer holds imported scores: there is no model to explain.
    refused = browser(owner).post(url, headers=HTMX).content.decode()
    assert "no model to run" in refused
    assert not AttributionRun.objects.filter(method="token-saliency").exists()


def test_saliency_from_the_page_starts_one_run_per_step(
    project: Project, owner: User, make_scorer: Any
) -> None:
    trajectory = trajectory_with_steps(project, ["2 + 2 = 4", "so the answer is 4"])
    tiny = make_scorer(name="tiny")
    ScoringRun.objects.create(project=project, scorer=tiny, status="done")
    step = trajectory.steps.get(index=1)
    url = reverse("step-saliency", args=[step.pk])
    client = browser(owner)
    column = client.get(
        reverse("trajectory-evidence", args=[trajectory.pk]),
        {"part": "step", "step": str(step.pk)},
        headers=HTMX,
    ).content.decode()
    assert f'hx-get="{url}"' in column and f'hx-target="#step-extra-{step.pk}"' in column
    first = client.post(url, headers=HTMX).content.decode()
    assert 'hx-trigger="every 2s"' in first and "Computing token saliency" in first
    client.post(url, headers=HTMX)
    run = AttributionRun.objects.get(method="token-saliency")
    assert run.selection == {"step": step.pk} and run.scorer == tiny
    run_to_completion(run)
    done = client.get(url, headers=HTMX).content.decode()
    assert "every 2s" not in done and 'class="saliency-token"' in done
    assert done.count('class="saliency-token"') == len(run.metrics["tokens"]) > 0
    assert "Recompute" in done


def test_members_of_other_projects_get_404(rollouts: dict[str, Trajectory]) -> None:
    stranger = UserFactory.create(username="stranger")
    other = Project.objects.create(slug="other", name="Other")
    MembershipFactory.create(user=stranger, project=other, role=Membership.Role.ADMIN)
    a = rollouts["A"]
    client = browser(stranger)
    assert client.get(reverse("trajectory-evidence", args=[a.pk])).status_code == 404
    response = api(stranger).post(
        "/api/v1/attribution-runs/", {"project": "demo", "method": "mc-prefix"}, format="json"
    )
    assert response.status_code == 404
