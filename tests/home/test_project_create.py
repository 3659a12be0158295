"""Creating a project from the project list and the API: the creator becomes its admin,
the project gets its default label schema, a taken slug is an error on ``slug`` that
changes nothing, and ``STEPSCOPE_PROJECT_CREATORS=staff`` keeps others out."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from labeling.models import LabelSchema
from tests.factories import UserFactory
from trajectories.models import Membership, Project

pytestmark = pytest.mark.django_db


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api_for(user: User) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def test_a_user_creates_a_project_from_the_list_and_becomes_its_admin(outsider: User) -> None:
    client = signed_in(outsider)
    page = client.get(reverse("project-list"))
    assert 'id="project-form"' in page.content.decode()

    response = client.post(
        reverse("project-list"), {"name": "Math PRM", "slug": "math-prm", "guidelines": "# Be kind"}
    )

    assert response.status_code == 302
    assert response["Location"] == reverse("project-home", args=["math-prm"])
    project = Project.objects.get(slug="math-prm")
    assert (project.name, project.guidelines) == ("Math PRM", "# Be kind")
    assert Membership.objects.get(project=project, user=outsider).role == "admin"
    assert LabelSchema.objects.filter(project=project, is_active=True).exists()
    home = client.get(response["Location"])
    assert "you are its admin" in home.content.decode()


def test_a_taken_slug_is_a_form_error_on_slug(project: Project, outsider: User) -> None:
    response = signed_in(outsider).post(
        reverse("project-list"), {"name": "Again", "slug": project.slug, "guidelines": ""}
    )

    assert response.status_code == 200
    assert "slug" in response.context["form"].errors
    assert 'id="slug-error"' in response.content.decode()
    assert Project.objects.count() == 1
    assert not Membership.objects.filter(user=outsider).exists()


def test_staff_only_setting_refuses_others_and_hides_the_form(
    outsider: User, settings: Any
) -> None:
    settings.STEPSCOPE_PROJECT_CREATORS = "staff"
    client = signed_in(outsider)
    assert 'id="project-form"' not in client.get(reverse("project-list")).content.decode()

    page = client.post(reverse("project-list"), {"name": "X", "slug": "x"})
    api = api_for(outsider).post("/api/v1/projects/", {"name": "X", "slug": "x"}, format="json")

    assert (page.status_code, api.status_code) == (403, 403)
    assert not Project.objects.filter(slug="x").exists()
    staff = UserFactory.create(username="staffer", is_staff=True)
    created = signed_in(staff).post(reverse("project-list"), {"name": "X", "slug": "x"})
    assert created.status_code == 302


def test_the_api_creates_a_project_with_its_creator_as_admin(outsider: User) -> None:
    response = api_for(outsider).post(
        "/api/v1/projects/",
        {"name": "Agents", "slug": "agents", "guidelines": "Read the task.", "settings": {"x": 1}},
        format="json",
    )

    assert response.status_code == 201, response.content
    assert response.json()["slug"] == "agents"
    project = Project.objects.get(slug="agents")
    assert project.settings == {}
    assert Membership.objects.get(project=project, user=outsider).role == "admin"
    assert api_for(outsider).get("/api/v1/projects/agents/").status_code == 200


def test_the_api_names_slug_for_a_taken_or_bad_slug(project: Project, outsider: User) -> None:
    client = api_for(outsider)
    taken = client.post("/api/v1/projects/", {"name": "A", "slug": project.slug}, format="json")
    bad = client.post("/api/v1/projects/", {"name": "A", "slug": "no spaces"}, format="json")

    assert (taken.status_code, bad.status_code) == (400, 400)
    assert "slug" in taken.json() and "slug" in bad.json()
    assert Project.objects.count() == 1
