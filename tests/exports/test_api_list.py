"""``GET /api/v1/exports/``: one project's exports with ``?project=``."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from exports.models import ExportJob
from tests.factories import MembershipFactory
from trajectories.models import Membership, Project
from trajectories.services import project_create

pytestmark = pytest.mark.django_db


def export(project: Project) -> ExportJob:
    return ExportJob.objects.create(
        project=project, format="stepscope", label_source="human:majority", neutral="drop"
    )


def test_the_list_narrows_to_one_project_and_refuses_others(project: Project, owner: User) -> None:
    other = project_create(slug="other", name="Other")
    MembershipFactory.create(user=owner, project=other, role=Membership.Role.ADMIN)
    theirs = project_create(slug="theirs", name="Theirs")
    mine, elsewhere = export(project), export(other)
    export(theirs)
    client = Client()
    client.force_login(owner)

    def listed(**query: str) -> set[int]:
        response = client.get("/api/v1/exports/", query)
        assert response.status_code == 200, response.content
        return {row["id"] for row in response.json()["results"]}

    assert listed(project="demo") == {mine.pk}
    assert listed(project="other") == {elsewhere.pk}
    assert listed() == {mine.pk, elsewhere.pk}
    assert client.get("/api/v1/exports/", {"project": "theirs"}).status_code == 404
    assert client.get("/api/v1/exports/", {"project": "nope"}).status_code == 404
