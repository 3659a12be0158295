"""A project's settings and its deletion, by its admins: the settings page and ``PATCH
/api/v1/projects/{slug}/`` change the name and guidelines (never the slug); deleting
needs the slug typed, hides the project from everyone at once and leaves the removal to
a worker, in batches, whose page says what was removed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from labeling.models import StepLabel
from tests.waiting import wait_until
from trajectories.models import Membership, Project, ProjectDeletion, Step, Trajectory
from trajectories.services import (
    membership_set,
    project_create,
    project_deletion_run,
    trajectory_records_import,
)


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api_for(user: User) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def records(count: int, steps: int = 3, prefix: str = "t") -> list[dict[str, Any]]:
    return [
        {
            "id": f"{prefix}-{n}",
            "task": f"task {n}",
            "steps": [
                {"content": f"step {s} of {n}", "labels": [{"annotator": "ref", "value": 1}]}
                for s in range(steps)
            ],
        }
        for n in range(count)
    ]


def filled(slug: str, admin: User, count: int, steps: int = 3) -> Project:
    project = project_create(slug=slug, name=slug.title(), owner=admin)
    trajectory_records_import(project=project, records=records(count, steps, slug))
    return project


@pytest.mark.django_db
def test_an_admin_changes_the_name_and_guidelines(project: Project, owner: User) -> None:
    client = signed_in(owner)
    page = client.get(reverse("project-settings", args=[project.slug]))
    assert page.status_code == 200 and 'id="settings-form"' in page.content.decode()

    saved = client.post(
        reverse("project-settings", args=[project.slug]),
        {"name": "Math PRM", "guidelines": "# Be strict"},
    )

    assert saved.status_code == 302
    project.refresh_from_db()
    assert (project.slug, project.name, project.guidelines) == ("demo", "Math PRM", "# Be strict")
    refused = client.post(reverse("project-settings", args=[project.slug]), {"name": ""})
    assert refused.status_code == 400 and 'id="name-error"' in refused.content.decode()
    project.refresh_from_db()
    assert project.name == "Math PRM"


@pytest.mark.django_db
def test_the_api_patches_name_and_guidelines_but_not_the_slug(
    project: Project, owner: User, annotator: User
) -> None:
    url = f"/api/v1/projects/{project.slug}/"
    response = api_for(owner).patch(url, {"name": "Renamed"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["name"] == "Renamed" and response.json()["slug"] == "demo"
    moved = api_for(owner).patch(url, {"slug": "elsewhere"}, format="json")
    assert moved.status_code == 400 and "slug" in moved.json()
    assert api_for(annotator).patch(url, {"name": "Mine"}, format="json").status_code == 403
    assert api_for(owner).put(url, {"name": "x", "slug": "demo"}, format="json").status_code == 405
    project.refresh_from_db()
    assert (project.slug, project.name) == ("demo", "Renamed")


@pytest.mark.django_db
def test_deleting_needs_the_slug_typed_and_changes_nothing_otherwise(owner: User) -> None:
    project = filled("kept", owner, 2)
    client = signed_in(owner)

    wrong = client.post(reverse("project-delete", args=["kept"]), {"confirm": "kep"})

    assert wrong.status_code == 400
    assert "Type the project&#x27;s slug, kept" in wrong.content.decode()
    api = api_for(owner).delete("/api/v1/projects/kept/", {"confirm": "nope"}, format="json")
    assert api.status_code == 400 and "confirm" in api.json()
    project.refresh_from_db()
    assert project.deleting_since is None and not ProjectDeletion.objects.exists()
    assert Trajectory.objects.filter(project=project).count() == 2


@pytest.mark.django_db
def test_the_worker_removes_a_project_in_batches_and_counts_what_went(owner: User) -> None:
    project = filled("big", owner, 10, steps=4)
    other = filled("other", owner, 2)
    deletion = ProjectDeletion.objects.create(
        project=project, slug="big", name="Big", created_by=owner, total_steps=40
    )
    # Batches of 8 steps: two trajectories at a time, five batches.
    project_deletion_run(deletion_id=deletion.pk, batch_steps=8)

    deletion.refresh_from_db()
    assert deletion.status == "done" and deletion.project_id is None
    assert deletion.removed["trajectories"] == 10
    assert deletion.removed["steps"] == 40 and deletion.removed_steps == 40
    assert deletion.removed["step labels"] == 40
    assert deletion.removed["projects"] == 1 and deletion.removed["label schemas"] == 1
    assert not Project.objects.filter(slug="big").exists()
    assert Step.objects.filter(trajectory__project=other).count() == 6
    assert StepLabel.objects.filter(step__trajectory__project=other).count() == 6
    # Run again (a redelivered task): nothing to do, nothing changes.
    project_deletion_run(deletion_id=deletion.pk)
    assert ProjectDeletion.objects.get(pk=deletion.pk).removed == deletion.removed


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_deleted_project_is_hidden_at_once_and_removed_by_the_worker(
    celery_worker: object,
) -> None:
    admin = User.objects.create_user("deleter")
    colleague = User.objects.create_user("colleague")
    project = filled("doomed", admin, 5)
    membership_set(project=project, user=colleague, role=Membership.Role.RESEARCHER)
    client = signed_in(admin)

    response = client.post(reverse("project-delete", args=["doomed"]), {"confirm": "doomed"})

    assert response.status_code == 302
    deletion = ProjectDeletion.objects.get(slug="doomed")
    assert response["Location"] == reverse("project-deletion", args=[deletion.pk])
    # Hidden for every member from now on, while the worker removes it.
    assert signed_in(colleague).get(reverse("project-home", args=["doomed"])).status_code == 404
    assert api_for(colleague).get("/api/v1/projects/doomed/").status_code == 404
    assert "doomed" not in signed_in(colleague).get(reverse("project-list")).content.decode()
    # Only whoever started it follows it.
    assert signed_in(colleague).get(response["Location"]).status_code == 404

    assert wait_until(
        lambda: ProjectDeletion.objects.get(pk=deletion.pk).status == "done", timeout=90
    ), ProjectDeletion.objects.get(pk=deletion.pk).status
    page = client.get(response["Location"]).content.decode()
    assert 'id="deletion-removed"' in page
    assert "<dt>Trajectories</dt><dd>5</dd>" in page and "<dt>Steps</dt><dd>15</dd>" in page
    assert not Project.objects.filter(slug="doomed").exists()
    assert not Trajectory.objects.filter(external_id__startswith="doomed-").exists()
    followed = api_for(admin).get(f"/api/v1/project-deletions/{deletion.pk}/").json()
    assert followed["status"] == "done" and followed["removed"]["step labels"] == 15


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_the_api_deletes_with_the_slug_confirmed(celery_worker: object) -> None:
    admin = User.objects.create_user("api-deleter")
    filled("api-doomed", admin, 3)

    response = api_for(admin).delete(
        "/api/v1/projects/api-doomed/",
        json.dumps({"confirm": "api-doomed"}),
        content_type="application/json",
    )

    assert response.status_code == 202, response.content
    deletion_id = response.json()["id"]
    again = api_for(admin).delete(
        "/api/v1/projects/api-doomed/", {"confirm": "api-doomed"}, format="json"
    )
    assert again.status_code == 404  # already hidden
    assert wait_until(
        lambda: ProjectDeletion.objects.get(pk=deletion_id).status == "done", timeout=90
    )
    assert ProjectDeletion.objects.get(pk=deletion_id).removed["trajectories"] == 3
