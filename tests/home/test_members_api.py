"""The members and invites API: the same services and rules as the members page (a
role that exists, the last admin kept, every change recorded), for project admins only."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.factories import UserFactory
from trajectories.models import Membership, MembershipEvent, MembershipInvite, Project

pytestmark = pytest.mark.django_db


def api_for(user: User) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def test_an_admin_adds_changes_and_removes_a_member(project: Project, owner: User) -> None:
    UserFactory.create(username="colleague")
    api = api_for(owner)
    base = f"/api/v1/projects/{project.slug}/members/"

    added = api.post(base, {"username": "colleague", "role": "annotator"}, format="json")
    assert added.status_code == 201, added.content
    member = added.json()
    assert (member["username"], member["role"]) == ("colleague", "annotator")
    again = api.post(base, {"username": "colleague", "role": "admin"}, format="json")
    assert again.status_code == 400 and "already a member" in again.json()["username"][0]
    nobody = api.post(base, {"username": "ghost"}, format="json")
    assert nobody.status_code == 400 and "ghost" in nobody.json()["username"][0]
    bad_role = api.post(f"{base}{member['id']}/role/", {"role": "boss"}, format="json")
    assert bad_role.status_code == 400 and "role" in bad_role.json()

    changed = api.post(f"{base}{member['id']}/role/", {"role": "researcher"}, format="json")
    assert changed.status_code == 200 and changed.json()["role"] == "researcher"
    listed = api.get(base).json()
    assert {(m["username"], m["role"]) for m in listed} == {
        ("owner", "admin"),
        ("colleague", "researcher"),
    }
    assert api.post(f"{base}{member['id']}/remove/").status_code == 204
    assert not Membership.objects.filter(project=project, user__username="colleague").exists()
    events = api.get(f"{base}events/").json()
    assert [e["action"] for e in events[:3]] == ["removed", "role_changed", "added"]
    assert events[0]["actor"] == "owner" and events[0]["member"] == "colleague"


def test_the_last_admin_is_kept(project: Project, owner: User) -> None:
    mine = Membership.objects.get(project=project, user=owner)
    base = f"/api/v1/projects/{project.slug}/members/{mine.pk}"
    demoted = api_for(owner).post(f"{base}/role/", {"role": "annotator"}, format="json")
    assert demoted.status_code == 400 and "last admin" in demoted.json()["role"][0]
    removed = api_for(owner).post(f"{base}/remove/")
    assert removed.status_code == 400 and "last admin" in removed.json()["role"][0]
    assert Membership.objects.get(pk=mine.pk).role == "admin"
    assert MembershipEvent.objects.filter(project=project).count() == 0


def test_invites_are_made_listed_used_and_revoked(project: Project, owner: User) -> None:
    api = api_for(owner)
    base = f"/api/v1/projects/{project.slug}/invites/"
    made = api.post(base, {"role": "researcher"}, format="json")
    assert made.status_code == 201, made.content
    link = made.json()["link"]
    assert "/invite/" in link and made.json()["role"] == "researcher"
    assert [i["id"] for i in api.get(base).json()] == [made.json()["id"]]
    assert "link" not in api.get(base).json()[0]  # shown once
    assert api.post(base, {"role": "king"}, format="json").status_code == 400

    path = link.split("testserver", 1)[1]
    joined = Client().post(
        path, {"username": "newbie", "password": "pw-x-1234", "password_again": "pw-x-1234"}
    )
    assert joined.status_code == 302
    assert Membership.objects.get(user__username="newbie").role == "researcher"
    assert api.get(base).json() == []  # a used link is no longer open
    used = MembershipInvite.objects.get()
    assert api.post(f"{base}{used.pk}/revoke/").status_code == 404

    other = api.post(base, {"role": "annotator"}, format="json").json()
    assert api.post(f"{base}{other['id']}/revoke/").status_code == 204
    opened = Client().get(other["link"].split("testserver", 1)[1])
    assert opened.status_code == 404


def test_members_of_other_roles_and_outsiders_are_refused(
    project: Project, annotator: User, outsider: User
) -> None:
    for url in ("members/", "members/events/", "invites/"):
        full = f"/api/v1/projects/{project.slug}/{url}"
        assert api_for(annotator).get(full).status_code == 403
        assert api_for(outsider).get(full).status_code == 404
    add = {"username": "outsider", "role": "admin"}
    members = f"/api/v1/projects/{project.slug}/members/"
    assert api_for(annotator).post(members, add, format="json").status_code == 403
    assert not Membership.objects.filter(user=outsider).exists()
