"""The read API: token auth, scoping to the user's projects, outsiders get 404."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.factories import ProjectFactory, trajectory_with_steps
from trajectories.models import Project

pytestmark = pytest.mark.django_db


def client_for(user: User) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def test_anonymous_is_refused() -> None:
    assert APIClient().get("/api/v1/projects/").status_code == 401


def test_member_lists_own_projects_only(project: Project, annotator: User) -> None:
    ProjectFactory.create(slug="other")
    response = client_for(annotator).get("/api/v1/projects/")
    assert response.status_code == 200
    assert [p["slug"] for p in response.json()] == ["demo"]


def test_trajectories_and_steps_for_a_member(project: Project, annotator: User) -> None:
    trajectory = trajectory_with_steps(project, ["a", "b", "c"])
    api = client_for(annotator)
    listed = api.get("/api/v1/trajectories/", {"project": "demo"}).json()
    assert [t["id"] for t in listed["results"]] == [trajectory.pk]
    steps = api.get("/api/v1/steps/", {"trajectory": trajectory.pk}).json()["results"]
    assert [s["content"] for s in steps] == ["a", "b", "c"]


def test_outsider_gets_404_and_sees_nothing(project: Project, outsider: User) -> None:
    trajectory = trajectory_with_steps(project, ["secret"])
    api = client_for(outsider)
    assert api.get(f"/api/v1/projects/{project.slug}/").status_code == 404
    assert api.get(f"/api/v1/trajectories/{trajectory.pk}/").status_code == 404
    step_id = trajectory.steps.get().pk
    assert api.get(f"/api/v1/steps/{step_id}/").status_code == 404
    assert api.get("/api/v1/trajectories/").json()["results"] == []
    assert api.get("/api/v1/steps/", {"trajectory": trajectory.pk}).json()["results"] == []


def test_openapi_schema_is_served(annotator: User) -> None:
    response = client_for(annotator).get("/api/v1/schema/")
    assert response.status_code == 200
    assert b"/api/v1/trajectories/" in response.content
