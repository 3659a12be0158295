"""The client's project-admin calls against a real Stepscope (pytest-django's live
server; the suite's Celery worker for the deletion): settings, members, invite links and
deleting a project, with the server's rules (last admin kept, the slug confirmed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from stepscope_client import Client, StepscopeError

from trajectories.models import Membership, Project

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def stepscope(live_server: Any, token: str) -> Iterator[Client]:
    with Client(live_server.url, token) as stepscope:
        yield stepscope


def test_an_admin_manages_settings_members_and_invites(
    stepscope: Client, project: Project, owner: User
) -> None:
    User.objects.create_user("ada")
    assert stepscope.update_project(project.slug, name="Renamed")["name"] == "Renamed"
    ada = stepscope.add_member(project.slug, "ada", "annotator")
    assert stepscope.set_role(project.slug, ada["id"], "researcher")["role"] == "researcher"
    assert {m["username"] for m in stepscope.members(project.slug)} == {"owner", "ada"}
    mine = Membership.objects.get(project=project, user=owner)
    with pytest.raises(StepscopeError) as refused:
        stepscope.remove_member(project.slug, mine.pk)
    assert refused.value.status == 400 and "last admin" in str(refused.value)
    stepscope.remove_member(project.slug, ada["id"])
    assert not Membership.objects.filter(user__username="ada").exists()

    link = stepscope.invite(project.slug, "annotator")
    assert "/invite/" in link["link"] and link["role"] == "annotator"
    assert [i["id"] for i in stepscope.invites(project.slug)] == [link["id"]]
    stepscope.revoke_invite(project.slug, link["id"])
    assert stepscope.invites(project.slug) == []


@pytest.mark.celery
def test_a_project_is_deleted_and_the_job_says_what_went(
    stepscope: Client, project: Project, celery_worker: object
) -> None:
    stepscope.push_trajectories(
        project.slug,
        [{"id": f"d{n}", "task": "t", "steps": [{"content": f"s{n}"}]} for n in range(3)],
    )
    with pytest.raises(StepscopeError) as refused:
        stepscope.delete_project(project.slug, confirm="wrong")
    assert refused.value.status == 400 and "confirm" in refused.value.errors

    job = stepscope.wait(stepscope.delete_project(project.slug, confirm=project.slug), timeout=90)

    assert job.status == "done" and job.progress == (3, 3)
    assert job.data["removed"]["trajectories"] == 3
    assert not Project.objects.filter(pk=project.pk).exists()
