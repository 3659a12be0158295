"""The scoring pages and REST endpoints: who may see, start, cancel and train; the live
progress rows; the score strip partial."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.template.loader import render_to_string
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from labeling.services import queue_create
from scoring import prm
from scoring.models import Scorer, ScoringRun
from scoring.selectors import step_scores_for_trajectory
from tests.factories import ProjectFactory, UserFactory, trajectory_with_steps
from trajectories.models import Project
from trajectories.selection import TrajectoryFilters
from trajectories.services import project_create

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


# --- REST ----------------------------------------------------------------------------------


def test_owner_starts_a_run_through_the_api(
    project: Project, owner: User, make_scorer: Callable[..., Scorer]
) -> None:
    trajectory = trajectory_with_steps(project, ["a", "b"])
    make_scorer(name="prm")
    response = api(owner).post(
        "/api/v1/scoring-runs/",
        {
            "project": "demo",
            "scorer": "prm",
            "only_unscored": True,
            "trajectories": [trajectory.pk],
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "queued" and body["scorer_name"] == "prm"
    run = ScoringRun.objects.get(pk=body["id"])
    assert run.selection == {"only_unscored": True, "trajectory_ids": [trajectory.pk]}
    assert run.created_by == owner
    detail = api(owner).get(f"/api/v1/scoring-runs/{run.pk}/").json()
    assert detail["total"] == 0 and detail["project"] == "demo"


def test_filters_are_part_of_the_selection(
    project: Project, owner: User, make_scorer: Callable[..., Scorer]
) -> None:
    scorer = make_scorer()
    response = api(owner).post(
        "/api/v1/scoring-runs/",
        {"project": "demo", "scorer": str(scorer.pk), "filters": {"outcome": "failure"}},
        format="json",
    )
    assert response.status_code == 201, response.content
    run = ScoringRun.objects.get()
    assert run.selection["filters"]["outcome"] == "failure"


def test_a_queue_by_name_or_id_is_part_of_the_selection(
    project: Project, owner: User, make_scorer: Callable[..., Scorer]
) -> None:
    make_scorer(name="prm")
    queue = queue_create(
        project=project, name="batch 1", created_by=None, filters=TrajectoryFilters()
    )
    for value in ("batch 1", str(queue.pk)):
        response = api(owner).post(
            "/api/v1/scoring-runs/",
            {"project": "demo", "scorer": "prm", "queue": value},
            format="json",
        )
        assert response.status_code == 201, response.content
        assert response.json()["selection"]["queue"] == queue.pk
    other = project_create(slug="other", name="Other")
    foreign = queue_create(
        project=other, name="theirs", created_by=None, filters=TrajectoryFilters()
    )
    for value in ("theirs", str(foreign.pk), "nope"):
        response = api(owner).post(
            "/api/v1/scoring-runs/",
            {"project": "demo", "scorer": "prm", "queue": value},
            format="json",
        )
        assert response.status_code == 400 and "queue" in response.json()


def test_annotators_may_watch_but_not_start(
    project: Project, annotator: User, make_scorer: Callable[..., Scorer]
) -> None:
    make_scorer(name="prm")
    response = api(annotator).post(
        "/api/v1/scoring-runs/", {"project": "demo", "scorer": "prm"}, format="json"
    )
    assert response.status_code == 403
    assert api(annotator).get("/api/v1/scoring-runs/", {"project": "demo"}).status_code == 200


def test_outsiders_get_404_and_see_no_runs(
    project: Project, owner: User, outsider: User, make_scorer: Callable[..., Scorer]
) -> None:
    own = make_scorer(name="mine", project=project)
    run = ScoringRun.objects.create(project=project, scorer=own)
    client = api(outsider)
    response = client.post(
        "/api/v1/scoring-runs/", {"project": "demo", "scorer": "mine"}, format="json"
    )
    assert response.status_code == 404
    assert client.get(f"/api/v1/scoring-runs/{run.pk}/").status_code == 404
    assert client.post(f"/api/v1/scoring-runs/{run.pk}/cancel/").status_code == 404
    assert client.get("/api/v1/scoring-runs/").json()["results"] == []
    assert client.get(f"/api/v1/scorers/{own.pk}/").status_code == 404
    assert own.pk not in [s["id"] for s in client.get("/api/v1/scorers/").json()["results"]]


def test_unknown_and_external_scorers_are_400(project: Project, owner: User) -> None:
    Scorer.objects.create(name="ext", kind=prm.EXTERNAL, project=project)
    client = api(owner)
    missing = client.post("/api/v1/scoring-runs/", {"project": "demo", "scorer": "nope"})
    assert missing.status_code == 400 and "no scorer" in missing.json()["scorer"]
    external = client.post("/api/v1/scoring-runs/", {"project": "demo", "scorer": "ext"})
    assert external.status_code == 400 and "import_scores" in external.json()["scorer"]


def test_cancel_through_the_api(
    project: Project, owner: User, annotator: User, make_scorer: Callable[..., Scorer]
) -> None:
    run = ScoringRun.objects.create(project=project, scorer=make_scorer())
    assert api(annotator).post(f"/api/v1/scoring-runs/{run.pk}/cancel/").status_code == 403
    response = api(owner).post(f"/api/v1/scoring-runs/{run.pk}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"


def test_scorers_a_project_may_use(
    project: Project, owner: User, make_scorer: Callable[..., Scorer]
) -> None:
    shared = make_scorer(name="shared")
    own = make_scorer(name="own", project=project)
    other = make_scorer(name="other", project=ProjectFactory.create())
    listed = {
        s["id"] for s in api(owner).get("/api/v1/scorers/", {"project": "demo"}).json()["results"]
    }
    assert listed == {shared.pk, own.pk}
    assert other.pk not in listed


def test_creating_scorers(project: Project, owner: User) -> None:
    client = api(owner)
    body = {
        "project": "demo",
        "name": "qwen-prm",
        "kind": "token-classification",
        "model_ref": "Qwen/Qwen2.5-Math-PRM-7B",
        "parameters": {"prompt_format": "chat"},
    }
    created = client.post("/api/v1/scorers/", body, format="json")
    assert created.status_code == 201, created.content
    assert Scorer.objects.get(pk=created.json()["id"]).project == project
    duplicate = client.post("/api/v1/scorers/", body, format="json")
    assert duplicate.status_code == 400
    bad = client.post(
        "/api/v1/scorers/", {**body, "name": "x", "parameters": {"batchsize": 3}}, format="json"
    )
    assert bad.status_code == 400 and "batchsize" in str(bad.json())
    # A scorer for every project needs staff.
    everywhere = client.post("/api/v1/scorers/", {**body, "project": None}, format="json")
    assert everywhere.status_code == 403
    staff = UserFactory.create(username="staff", is_staff=True)
    assert (
        api(staff).post("/api/v1/scorers/", {**body, "project": None}, format="json").status_code
        == 201
    )


def test_training_through_the_api(project: Project, owner: User, annotator: User) -> None:
    body = {"project": "demo", "name": "head", "holdout": 0.25}
    assert api(annotator).post("/api/v1/scorers/train/", body, format="json").status_code == 403
    response = api(owner).post("/api/v1/scorers/train/", body, format="json")
    assert response.status_code == 202, response.content
    run = ScoringRun.objects.get(pk=response.json()["id"])
    assert run.kind == ScoringRun.Kind.TRAIN and run.parameters["holdout"] == 0.25


def test_schema_lists_the_scoring_endpoints(annotator: User) -> None:
    schema = api(annotator).get("/api/v1/schema/").content
    assert b"/api/v1/scoring-runs/" in schema and b"/api/v1/scorers/" in schema


# --- Pages ---------------------------------------------------------------------------------


def test_project_home_loads_the_scoring_section(project: Project, annotator: User) -> None:
    html = browser(annotator).get(reverse("project-home", args=["demo"])).content.decode()
    section = reverse("scoring-section", args=["demo"])
    assert f'hx-get="{section}"' in html and 'hx-trigger="load"' in html
    assert f'href="{section}"' in html  # and a plain link without JavaScript


def test_section_for_members_only(project: Project, annotator: User, outsider: User) -> None:
    url = reverse("scoring-section", args=["demo"])
    assert browser(outsider).get(url).status_code == 404
    page = browser(annotator).get(url)
    assert page.status_code == 200
    assert b"Score steps" not in page.content  # annotators watch; they do not start runs
    partial = browser(annotator).get(url, headers=HTMX).content.decode()
    assert partial.lstrip().startswith('<section class="scoring" id="scoring-section">')


def test_owner_starts_a_run_from_the_page(
    project: Project, owner: User, make_scorer: Callable[..., Scorer]
) -> None:
    scorer = make_scorer(name="prm")
    client = browser(owner)
    page = client.get(reverse("scoring-section", args=["demo"])).content.decode()
    assert "Score steps" in page and "prm" in page
    response = client.post(
        reverse("scoring-run-start", args=["demo"]), {"scorer": scorer.pk}, headers=HTMX
    )
    assert response.status_code == 200
    run = ScoringRun.objects.get()
    html = response.content.decode()
    assert f'id="scoring-run-{run.pk}"' in html
    assert 'hx-trigger="every 2s"' in html  # a queued run polls for progress
    assert reverse("scoring-run-cancel", args=[run.pk]) in html


def test_owner_scores_a_queue_from_the_page(
    project: Project, owner: User, make_scorer: Callable[..., Scorer]
) -> None:
    scorer = make_scorer(name="prm")
    queue = queue_create(
        project=project, name="batch 1", created_by=None, filters=TrajectoryFilters()
    )
    other = project_create(slug="other", name="Other")
    foreign = queue_create(
        project=other, name="theirs", created_by=None, filters=TrajectoryFilters()
    )
    client = browser(owner)
    page = client.get(reverse("scoring-section", args=["demo"])).content.decode()
    assert "batch 1" in page and "theirs" not in page
    url = reverse("scoring-run-start", args=["demo"])
    response = client.post(url, {"scorer": scorer.pk, "queue": foreign.pk}, headers=HTMX)
    assert "Select a valid choice" in response.content.decode()
    assert not ScoringRun.objects.exists()
    client.post(url, {"scorer": scorer.pk, "queue": queue.pk}, headers=HTMX)
    assert ScoringRun.objects.get().selection["queue"] == queue.pk


def test_annotator_cannot_start_or_cancel(
    project: Project, annotator: User, make_scorer: Callable[..., Scorer]
) -> None:
    scorer = make_scorer()
    client = browser(annotator)
    start = client.post(reverse("scoring-run-start", args=["demo"]), {"scorer": scorer.pk})
    assert start.status_code == 403
    run = ScoringRun.objects.create(project=project, scorer=scorer)
    assert client.post(reverse("scoring-run-cancel", args=[run.pk])).status_code == 403
    assert client.post(reverse("scorer-train", args=["demo"]), {"name": "h"}).status_code == 403


def test_progress_row_polls_until_the_run_ends(
    project: Project, owner: User, make_scorer: Callable[..., Scorer]
) -> None:
    from django.utils import timezone

    run = ScoringRun.objects.create(
        project=project,
        scorer=make_scorer(),
        status=ScoringRun.Status.RUNNING,
        total=200,
        done=50,
        started_at=timezone.now() - timedelta(seconds=10),
    )
    client = browser(owner)
    row = client.get(reverse("scoring-run-row", args=[run.pk]), headers=HTMX).content.decode()
    assert 'hx-trigger="every 2s"' in row
    assert 'value="50"' in row and 'max="200"' in row and "50/200" in row
    # 50 steps in the 10 s since the start: 5.0 steps/s and an ETA of 30 s, give or take
    # the moments this request took on a busy machine.
    assert re.search(r"\b(4\.[5-9]|5\.0)\b", row)  # steps/s so far
    assert re.search(r"\b3[0-3]s\b", row)  # ETA: 150 steps at about 5/s
    cancelled = client.post(
        reverse("scoring-run-cancel", args=[run.pk]), headers=HTMX
    ).content.decode()
    assert "cancelled" in cancelled and "hx-trigger" not in cancelled
    run.status = ScoringRun.Status.FAILED
    run.error = "OSError: no such model"
    run.save()
    failed = client.get(reverse("scoring-run-row", args=[run.pk]), headers=HTMX).content.decode()
    assert "OSError: no such model" in failed and "hx-trigger" not in failed


def test_owner_trains_from_the_page(project: Project, owner: User) -> None:
    response = browser(owner).post(
        reverse("scorer-train", args=["demo"]), {"name": "head", "neutral": "skip"}, headers=HTMX
    )
    assert response.status_code == 200
    run = ScoringRun.objects.get(kind=ScoringRun.Kind.TRAIN)
    assert f'id="scoring-run-{run.pk}"' in response.content.decode()


def test_score_strip_partial(project: Project, make_scorer: Callable[..., Scorer]) -> None:
    trajectory = trajectory_with_steps(project, ["a", "b", "c"])
    scorer = make_scorer()
    steps = list(trajectory.steps.order_by("index"))
    from scoring.models import StepScore

    StepScore.objects.create(step=steps[0], scorer=scorer, value=1.0)
    StepScore.objects.create(step=steps[1], scorer=scorer, value=0.0)
    scores = step_scores_for_trajectory(trajectory, scorer)
    html = render_to_string("scoring/_score_strip.html", {"steps": steps, "scores": scores})
    assert html.count('class="score-cell') == 3
    assert "hsl(120 65% 45%)" in html and "hsl(0 65% 45%)" in html  # green, red
    assert f'href="#step-{steps[2].pk}"' in html and "no score" in html


def test_form_errors_come_back_in_the_section(
    project: Project, owner: User, make_scorer: Callable[..., Scorer]
) -> None:
    make_scorer(name="taken", project=project)
    response = browser(owner).post(
        reverse("scorer-train", args=["demo"]), {"name": "taken", "neutral": "skip"}, headers=HTMX
    )
    assert response.status_code == 200  # htmx swaps only successful responses
    assert "is a scorer of another kind" in response.content.decode()
    assert not ScoringRun.objects.exists()
