"""The members page: project admins add existing users with a role, change roles and
remove members; the last admin stays; every change is recorded and shown; other members
get 403 and outsiders 404."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.factories import MembershipFactory, UserFactory
from trajectories.models import Membership, MembershipEvent, Project
from trajectories.services import project_create

pytestmark = pytest.mark.django_db


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def members_url(project: Project) -> str:
    return reverse("member-list", args=[project.slug])


def test_admin_adds_an_existing_user_with_a_role(project: Project, owner: User) -> None:
    newcomer = UserFactory.create(username="newcomer")
    client = signed_in(owner)

    response = client.post(members_url(project), {"username": "newcomer", "role": "researcher"})

    assert response.status_code == 302
    assert Membership.objects.get(project=project, user=newcomer).role == "researcher"
    event = MembershipEvent.objects.get(project=project, member=newcomer)
    assert (event.actor, event.action, event.role_before, event.role_after) == (
        owner,
        "added",
        "",
        "researcher",
    )
    page = client.get(members_url(project)).content.decode()
    assert "newcomer added as researcher." in page
    assert "added newcomer as researcher" in page
    assert f'id="member-event-{event.pk}"' in page


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"username": "nobody", "role": "annotator"}, "username"),
        ({"username": "annotator", "role": "annotator"}, "username"),
        ({"username": "newcomer", "role": "overlord"}, "role"),
        ({}, "username"),
    ],
)
def test_bad_additions_name_the_field_and_change_nothing(
    project: Project, owner: User, annotator: User, data: dict[str, str], field: str
) -> None:
    UserFactory.create(username="newcomer")
    before = set(Membership.objects.values_list("user__username", "role"))

    response = signed_in(owner).post(members_url(project), data)

    assert response.status_code == 400
    assert field in response.context["form"].errors
    assert f'id="{field}-error"' in response.content.decode()
    assert set(Membership.objects.values_list("user__username", "role")) == before
    assert not MembershipEvent.objects.filter(action="added").exclude(member=owner).exists()


def test_admin_changes_a_role_and_it_is_recorded(
    project: Project, owner: User, annotator: User
) -> None:
    membership = Membership.objects.get(project=project, user=annotator)
    client = signed_in(owner)

    response = client.post(
        reverse("member-role", args=[project.slug, membership.pk]), {"role": "researcher"}
    )

    assert response.status_code == 302
    membership.refresh_from_db()
    assert membership.role == "researcher"
    event = MembershipEvent.objects.get(action="role_changed")
    assert (event.actor, event.member, event.role_before, event.role_after) == (
        owner,
        annotator,
        "annotator",
        "researcher",
    )
    page = client.get(members_url(project)).content.decode()
    assert "changed annotator from annotator to researcher" in page


def test_a_role_that_does_not_exist_is_a_400_naming_role(
    project: Project, owner: User, annotator: User
) -> None:
    membership = Membership.objects.get(project=project, user=annotator)

    response = signed_in(owner).post(
        reverse("member-role", args=[project.slug, membership.pk]), {"role": "overlord"}
    )

    assert response.status_code == 400
    assert "role: choose one of annotator, researcher, admin." in response.content.decode()
    membership.refresh_from_db()
    assert membership.role == "annotator"


def test_admin_removes_a_member_and_it_is_recorded(
    project: Project, owner: User, annotator: User
) -> None:
    membership = Membership.objects.get(project=project, user=annotator)
    client = signed_in(owner)

    response = client.post(reverse("member-remove", args=[project.slug, membership.pk]))

    assert response.status_code == 302
    assert not Membership.objects.filter(project=project, user=annotator).exists()
    event = MembershipEvent.objects.get(action="removed")
    assert (event.actor, event.member_username, event.role_before) == (
        owner,
        "annotator",
        "annotator",
    )
    assert "removed annotator (annotator)" in client.get(members_url(project)).content.decode()
    project_page = signed_in(annotator).get(reverse("project-home", args=[project.slug]))
    assert project_page.status_code == 404


def test_the_last_admin_can_be_neither_demoted_nor_removed(project: Project, owner: User) -> None:
    membership = Membership.objects.get(project=project, user=owner)
    client = signed_in(owner)

    demoted = client.post(
        reverse("member-role", args=[project.slug, membership.pk]), {"role": "annotator"}
    )
    removed = client.post(reverse("member-remove", args=[project.slug, membership.pk]))

    for response in (demoted, removed):
        assert response.status_code == 400
        assert "the project&#x27;s last admin" in response.content.decode()
    membership.refresh_from_db()
    assert membership.role == "admin"
    assert not MembershipEvent.objects.filter(project=project).exists()


def test_with_a_second_admin_an_admin_may_step_down(project: Project, owner: User) -> None:
    other = UserFactory.create(username="other-admin")
    MembershipFactory.create(user=other, project=project, role=Membership.Role.ADMIN)
    membership = Membership.objects.get(project=project, user=owner)

    response = signed_in(owner).post(
        reverse("member-role", args=[project.slug, membership.pk]), {"role": "researcher"}
    )

    assert response.status_code == 302
    assert response["Location"] == reverse("project-home", args=[project.slug])
    membership.refresh_from_db()
    assert membership.role == "researcher"
    other_membership = Membership.objects.get(user=other)
    refused = signed_in(other).post(
        reverse("member-remove", args=[project.slug, other_membership.pk])
    )
    assert refused.status_code == 400


def test_a_created_project_records_its_first_admin(outsider: User) -> None:
    project = project_create(slug="fresh", name="Fresh", owner=outsider)

    event = MembershipEvent.objects.get(project=project)
    assert (event.actor, event.member, event.action, event.role_after) == (
        outsider,
        outsider,
        "added",
        "admin",
    )


def test_non_admins_get_403_and_outsiders_404(
    project: Project, annotator: User, outsider: User
) -> None:
    researcher = UserFactory.create(username="researcher")
    MembershipFactory.create(user=researcher, project=project, role=Membership.Role.RESEARCHER)

    assert signed_in(annotator).get(members_url(project)).status_code == 403
    assert signed_in(researcher).get(members_url(project)).status_code == 403
    assert signed_in(outsider).get(members_url(project)).status_code == 404
    home = signed_in(researcher).get(reverse("project-home", args=[project.slug]))
    assert 'id="members-link"' not in home.content.decode()


def test_a_membership_of_another_project_is_a_404(project: Project, owner: User) -> None:
    other = project_create(slug="other", name="Other", owner=UserFactory.create(username="x"))
    foreign = Membership.objects.get(project=other)

    response = signed_in(owner).post(
        reverse("member-remove", args=[project.slug, foreign.pk]), {"role": "annotator"}
    )

    assert response.status_code == 404
    assert Membership.objects.filter(pk=foreign.pk).exists()


def test_the_project_home_links_admins_to_the_members_page(project: Project, owner: User) -> None:
    home = signed_in(owner).get(reverse("project-home", args=[project.slug])).content.decode()
    assert f'href="{members_url(project)}"' in home


def test_member_forms_need_csrf(project: Project, owner: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    UserFactory.create(username="newcomer")

    response = client.post(members_url(project), {"username": "newcomer", "role": "admin"})

    assert response.status_code == 403
    assert not Membership.objects.filter(user__username="newcomer").exists()
