"""The rollout pages and REST endpoints: who may see, start and cancel; the step panel
and its include; outsiders get a 404 everywhere."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.template.loader import render_to_string
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from rollouts import services
from rollouts.models import Policy, RolloutJob
from tests.factories import trajectory_with_steps
from trajectories.models import Project, Step

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


@pytest.fixture
def step(project: Project) -> Step:
    trajectory = trajectory_with_steps(project, ["1 + 1 = 2", "The answer is 2."], ground_truth="2")
    return trajectory.steps.get(index=0)


@pytest.fixture
def job(project: Project, step: Step, make_policy: Callable[..., Policy]) -> RolloutJob:
    return services.rollout_job_start(
        project=project, policy=make_policy(project=project), k=2, step_ids=[step.pk]
    )


def test_outsider_gets_404_on_every_page_and_endpoint(
    outsider: User, project: Project, step: Step, job: RolloutJob
) -> None:
    policy = job.policy
    assert policy is not None
    client = browser(outsider)
    for url in (
        f"/p/{project.slug}/rollouts/",
        f"/rollout-jobs/{job.pk}/",
        f"/steps/{step.pk}/rollouts/",
    ):
        assert client.get(url, headers=HTMX).status_code == 404, url
    for url in (
        f"/p/{project.slug}/rollouts/jobs/",
        f"/rollout-jobs/{job.pk}/cancel/",
        f"/steps/{step.pk}/rollouts/start/",
    ):
        data = {"policy": policy.pk, "k": 2, "steps": "all", "answer_check": "numeric"}
        assert client.post(url, data, headers=HTMX).status_code == 404, url
    rest = api(outsider)
    assert rest.get(f"/api/v1/rollouts/{job.pk}/").status_code == 404
    assert rest.post(f"/api/v1/rollouts/{job.pk}/cancel/").status_code == 404
    assert rest.get(f"/api/v1/policies/{policy.pk}/").status_code == 404
    assert rest.get("/api/v1/rollouts/").json()["results"] == []
    assert policy.pk not in [p["id"] for p in rest.get("/api/v1/policies/").json()["results"]]
    started = rest.post(
        "/api/v1/rollouts/", {"project": project.slug, "policy": policy.name, "k": 2}, format="json"
    )
    assert started.status_code == 404
    created = rest.post(
        "/api/v1/policies/", {"project": project.slug, "name": "p", "model_ref": "x"}, format="json"
    )
    assert created.status_code == 404
    job.refresh_from_db()
    assert job.status == RolloutJob.Status.QUEUED


def test_owner_starts_and_cancels_through_the_api(
    owner: User, project: Project, step: Step, make_policy: Callable[..., Policy]
) -> None:
    make_policy("tiny")
    rest = api(owner)
    response = rest.post(
        "/api/v1/rollouts/",
        {
            "project": project.slug,
            "policy": "tiny",
            "k": 4,
            "steps": "first-error-search",
            "max_continuations": 40,
            "answer_check": "numeric:0.01",
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["status"], body["mode"], body["k"], body["policy_name"]) == (
        "queued",
        "first-error-search",
        4,
        "tiny",
    )
    assert body["answer_check"] == "numeric:0.01" and body["max_continuations"] == 40
    detail = rest.get(f"/api/v1/rollouts/{body['id']}/").json()
    assert detail["searches"] == []
    cancelled = rest.post(f"/api/v1/rollouts/{body['id']}/cancel/").json()
    assert cancelled["status"] == "cancelled"
    steps = rest.post(
        "/api/v1/rollouts/",
        {
            "project": project.slug,
            "policy": "tiny",
            "k": 2,
            "steps": [step.pk],
            "critical": True,
            "alternatives": {str(step.pk): "1 + 1 = 3"},
        },
        format="json",
    )
    assert steps.status_code == 201, steps.content
    created = RolloutJob.objects.get(pk=steps.json()["id"])
    assert created.mode == RolloutJob.Mode.CRITICAL
    assert created.selection == {"step_ids": [step.pk], "alternatives": {str(step.pk): "1 + 1 = 3"}}
    for bad in ({"steps": "some"}, {"steps": [], "k": 2}, {"k": 0}, {"answer_check": "fuzzy"}):
        payload = {"project": project.slug, "policy": "tiny", "k": 2, **bad}
        assert rest.post("/api/v1/rollouts/", payload, format="json").status_code == 400, bad


def test_policies_through_the_api(owner: User, project: Project) -> None:
    rest = api(owner)
    body = {
        "project": project.slug,
        "name": "mine",
        "model_ref": "/models/lm",
        "parameters": {"temperature": 0.7, "stop": ["\n\n"]},
    }
    # A directory outside the operator's model directories is refused, naming the field.
    refused = rest.post("/api/v1/policies/", body, format="json")
    assert (
        refused.status_code == 400 and "outside the model directories" in refused.content.decode()
    )
    inside = Path(settings.STEPSCOPE_MODEL_DIRS[0]) / "lm"
    response = rest.post("/api/v1/policies/", {**body, "model_ref": str(inside)}, format="json")
    assert response.status_code == 201, response.content
    assert (
        rest.post(
            "/api/v1/policies/",
            {"project": project.slug, "name": "bad", "model_ref": "x", "parameters": {"tmp": 1}},
            format="json",
        ).status_code
        == 400
    )
    # A policy for every project needs staff.
    glob = rest.post("/api/v1/policies/", {"name": "g", "model_ref": "x"}, format="json")
    assert glob.status_code == 403
    listed = rest.get(f"/api/v1/policies/?project={project.slug}").json()["results"]
    assert [p["name"] for p in listed] == ["mine"]


def test_annotator_sees_the_panel_but_cannot_start(
    annotator: User, project: Project, step: Step, make_policy: Callable[..., Policy]
) -> None:
    policy = make_policy()
    client = browser(annotator)
    panel = client.get(f"/steps/{step.pk}/rollouts/", headers=HTMX)
    assert panel.status_code == 200
    assert b"Rollouts from step 0" in panel.content and b"<form" not in panel.content
    start = client.post(f"/steps/{step.pk}/rollouts/start/", {"policy": policy.pk, "k": 2})
    assert start.status_code == 403
    assert (
        api(annotator)
        .post(
            "/api/v1/rollouts/", {"project": project.slug, "policy": "tiny", "k": 2}, format="json"
        )
        .status_code
        == 403
    )
    assert not RolloutJob.objects.exists()


def test_roll_out_from_here_is_offered_only_to_those_who_may_start_one(
    owner: User, annotator: User, step: Step, make_policy: Any
) -> None:
    link = b'href="/steps/%d/rollouts/"' % step.pk
    trajectory = f"/t/{step.trajectory_id}/"
    # Not without a policy the project may use.
    assert link not in browser(owner).get(trajectory).content
    make_policy(project=step.trajectory.project)
    owners_page = browser(owner).get(trajectory)
    assert owners_page.status_code == 200 and link in owners_page.content
    annotators_page = browser(annotator).get(trajectory)
    assert annotators_page.status_code == 200
    assert (
        link not in annotators_page.content and b"roll out from here" not in annotators_page.content
    )


def test_the_demo_policy_is_offered_only_on_the_demo_projects(
    owner: User, project: Project, step: Step, make_policy: Callable[..., Policy]
) -> None:
    from rollouts.models import DemoPolicyTraining

    demo = make_policy("demo-policy")
    shared = make_policy("shared")
    client = browser(owner)

    def offered(url: str) -> set[str]:
        html = client.get(url, headers=HTMX).content.decode()
        return {name for name in ("demo-policy", "shared") if f">{name}</option>" in html}

    section, panel = f"/p/{project.slug}/rollouts/", f"/steps/{step.pk}/rollouts/"
    assert offered(section) == offered(panel) == {"shared"}
    refused = client.post(
        f"/p/{project.slug}/rollouts/jobs/",
        {"policy": demo.pk, "k": 2, "steps": "all", "answer_check": "numeric"},
        headers=HTMX,
    )
    assert refused.status_code == 200 and not RolloutJob.objects.exists()
    started = api(owner).post(
        "/api/v1/rollouts/",
        {"project": project.slug, "policy": "demo-policy", "k": 2},
        format="json",
    )
    assert started.status_code == 400 and not RolloutJob.objects.exists()

    DemoPolicyTraining.objects.create(project=project, rollout_tasks=1)
    assert offered(section) == offered(panel) == {"demo-policy", "shared"}
    assert shared.pk != demo.pk


def test_roll_out_from_a_step_in_the_panel(
    owner: User, project: Project, step: Step, make_policy: Callable[..., Policy]
) -> None:
    policy = make_policy()
    client = browser(owner)
    panel = client.get(f"/steps/{step.pk}/rollouts/", headers=HTMX)
    assert b'hx-post="/steps/%d/rollouts/start/"' % step.pk in panel.content
    started = client.post(
        f"/steps/{step.pk}/rollouts/start/", {"policy": policy.pk, "k": 3}, headers=HTMX
    )
    assert started.status_code == 200
    job = RolloutJob.objects.get()
    assert (job.mode, job.k, job.selection) == ("steps", 3, {"step_ids": [step.pk]})
    assert job.options == {"chunk_continuations": 4}
    # Work in flight: the live part polls itself, and only it.
    live = f'hx-get="/steps/{step.pk}/rollouts/?live=1" hx-trigger="every 2s"'
    assert live.encode() in started.content
    polled = client.get(f"/steps/{step.pk}/rollouts/?live=1", headers=HTMX)
    assert b"job #%d" % job.pk in polled.content and b"<form class" not in polled.content
    replaced = client.post(
        f"/steps/{step.pk}/rollouts/start/",
        {"policy": policy.pk, "k": 2, "replace": "on", "alternative": "1 + 1 = 3"},
        headers=HTMX,
    )
    assert replaced.status_code == 200
    assert RolloutJob.objects.filter(mode=RolloutJob.Mode.CRITICAL).count() == 1
    # Without JavaScript: the panel is a page of its own, and the form redirects to it.
    page = client.get(f"/steps/{step.pk}/rollouts/")
    assert page.status_code == 200 and b"<html" in page.content
    redirected = client.post(f"/steps/{step.pk}/rollouts/start/", {"policy": policy.pk, "k": 2})
    assert redirected.status_code == 302


def test_project_section_starts_jobs_and_rows_poll_until_done(
    owner: User, project: Project, step: Step, make_policy: Callable[..., Policy]
) -> None:
    policy = make_policy()
    client = browser(owner)
    section = client.get(f"/p/{project.slug}/rollouts/", headers=HTMX)
    assert section.status_code == 200 and b"No rollouts yet" in section.content
    response = client.post(
        f"/p/{project.slug}/rollouts/jobs/",
        {"policy": policy.pk, "k": 2, "steps": "all", "answer_check": "numeric"},
        headers=HTMX,
    )
    assert response.status_code == 200
    job = RolloutJob.objects.get()
    assert b'id="rollout-job-%d"' % job.pk in response.content
    assert b"every 2s" in client.get(f"/rollout-jobs/{job.pk}/", headers=HTMX).content
    cancelled = client.post(f"/rollout-jobs/{job.pk}/cancel/", headers=HTMX)
    assert b"cancelled" in cancelled.content and b"every 2s" not in cancelled.content
    bad = client.post(
        f"/p/{project.slug}/rollouts/jobs/",
        {"policy": policy.pk, "k": 2, "steps": "all", "answer_check": "fuzzy"},
        headers=HTMX,
    )
    assert b"unknown answer check" in bad.content


def test_the_step_include_renders_a_link_without_queries(step: Step) -> None:
    with CaptureQueriesContext(connection) as queries:
        html = render_to_string("rollouts/_step_rollout.html", {"step": step})
    assert len(queries) == 0
    assert f'href="/steps/{step.pk}/rollouts/"' in html
    assert f'hx-target="#step-rollouts-{step.pk}"' in html


def test_a_project_hiding_model_scores_hides_mc_values_from_annotators(
    owner: User, annotator: User, project: Project, step: Step, job: RolloutJob
) -> None:
    from rollouts.models import StepMC

    assert job.policy is not None
    StepMC.objects.create(
        step=step, policy=job.policy, job=job, k=4, successes=3, soft=0.75, hard=True
    )
    project.settings = {"hide_model_scores": True}
    project.save()
    hidden = browser(annotator).get(f"/steps/{step.pk}/rollouts/", headers=HTMX)
    assert hidden.status_code == 200
    assert b"hidden until you submit" in hidden.content and b"(3/4" not in hidden.content
    assert b"every 2s" not in hidden.content
    shown = browser(owner).get(f"/steps/{step.pk}/rollouts/", headers=HTMX)
    assert b"(3/4" in shown.content and b"hidden until you submit" not in shown.content
    project.settings = {}
    project.save()
    assert b"(3/4" in browser(annotator).get(f"/steps/{step.pk}/rollouts/", headers=HTMX).content
