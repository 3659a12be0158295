"""Invite links: an admin makes one with a role and sees it once; whoever opens it picks a
username and password, joins with that role and is signed in; a used, expired or unknown
link gets a page that says so; a bad username or password names its field and uses
nothing up."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from trajectories.models import Membership, MembershipEvent, MembershipInvite, Project
from trajectories.services import invite_create

pytestmark = pytest.mark.django_db

GOOD = {
    "username": "newbie",
    "password": "a long passphrase 42",
    "password_again": "a long passphrase 42",
}


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_admin_makes_a_link_that_is_shown_once(project: Project, owner: User) -> None:
    client = signed_in(owner)

    response = client.post(reverse("invite-new", args=[project.slug]), {"role": "researcher"})

    assert response.status_code == 201
    link = re.search(r'http://testserver(/invite/[^/"<]+/)', response.content.decode())
    assert link is not None
    invite = MembershipInvite.objects.get(project=project)
    assert invite.role == "researcher"
    assert link.group(1).split("/")[2] not in invite.secret_digest
    assert timedelta(days=6) < invite.expires_at - timezone.now() <= timedelta(days=7)
    again = client.get(reverse("member-list", args=[project.slug])).content.decode()
    assert link.group(1) not in again
    assert 'id="invites-pending"' in again


def test_the_invitee_joins_with_the_role_and_is_signed_in(project: Project, owner: User) -> None:
    _, secret = invite_create(project=project, actor=owner, role="researcher")
    client = Client()
    url = reverse("invite-accept", args=[secret])
    assert "Join Demo" in client.get(url).content.decode()

    response = client.post(url, GOOD)

    assert response.status_code == 302
    assert response["Location"] == reverse("project-home", args=[project.slug])
    user = User.objects.get(username="newbie")
    assert user.check_password(GOOD["password"])
    assert Membership.objects.get(user=user, project=project).role == "researcher"
    assert client.get(response["Location"]).status_code == 200
    event = MembershipEvent.objects.get(action="joined")
    assert (event.actor, event.member, event.role_after) == (owner, user, "researcher")
    history = signed_in(owner).get(reverse("member-list", args=[project.slug])).content.decode()
    assert "newbie joined as researcher by invite link" in history


def test_a_used_link_gets_a_clear_page(project: Project, owner: User) -> None:
    _, secret = invite_create(project=project, actor=owner, role="annotator")
    url = reverse("invite-accept", args=[secret])
    assert Client().post(url, GOOD).status_code == 302

    for response in (
        Client().get(url),
        Client().post(url, {**GOOD, "username": "second"}),
    ):
        assert response.status_code == 410
        assert "already been used" in response.content.decode()
    assert not User.objects.filter(username="second").exists()


def test_an_expired_link_gets_a_clear_page(project: Project, owner: User) -> None:
    invite, secret = invite_create(project=project, actor=owner, role="annotator")
    invite.expires_at = timezone.now() - timedelta(seconds=1)
    invite.save(update_fields=["expires_at"])

    response = Client().post(reverse("invite-accept", args=[secret]), GOOD)

    assert response.status_code == 410
    assert "has expired" in response.content.decode()
    assert not User.objects.filter(username="newbie").exists()


def test_an_unknown_link_is_a_404_that_says_so(project: Project) -> None:
    response = Client().get(reverse("invite-accept", args=["not-a-secret"]))
    assert response.status_code == 404
    assert "not known" in response.content.decode()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({**GOOD, "username": "owner"}, "username"),
        ({**GOOD, "username": "bad name!"}, "username"),
        ({**GOOD, "password": "short", "password_again": "short"}, "password"),
        ({**GOOD, "password_again": "something else"}, "password_again"),
    ],
)
def test_a_bad_username_or_password_names_the_field_and_keeps_the_link(
    project: Project, owner: User, data: dict[str, str], field: str
) -> None:
    invite, secret = invite_create(project=project, actor=owner, role="annotator")
    url = reverse("invite-accept", args=[secret])

    response = Client().post(url, data)

    assert response.status_code == 400
    assert field in response.context["form"].errors
    assert f'id="{field}-error"' in response.content.decode()
    invite.refresh_from_db()
    assert invite.used_at is None
    assert Client().post(url, GOOD).status_code == 302


def test_only_admins_make_links(project: Project, annotator: User, outsider: User) -> None:
    url = reverse("invite-new", args=["demo"])
    assert signed_in(annotator).post(url, {"role": "admin"}).status_code == 403
    assert signed_in(outsider).post(url, {"role": "admin"}).status_code == 404
    assert not MembershipInvite.objects.exists()


def test_a_role_that_does_not_exist_makes_no_link(project: Project, owner: User) -> None:
    response = signed_in(owner).post(reverse("invite-new", args=["demo"]), {"role": "overlord"})
    assert response.status_code == 400
    assert "role: choose one of" in response.content.decode()
    assert not MembershipInvite.objects.exists()


def test_an_admin_revokes_an_open_link(project: Project, owner: User, annotator: User) -> None:
    invite, secret = invite_create(project=project, actor=owner, role="admin")
    revoke = reverse("invite-revoke", args=[project.slug, invite.pk])
    assert signed_in(annotator).post(revoke).status_code == 403

    response = signed_in(owner).post(revoke)

    assert response.status_code == 302
    assert not MembershipInvite.objects.exists()
    opened = Client().post(reverse("invite-accept", args=[secret]), GOOD)
    assert opened.status_code == 404
    assert not User.objects.filter(username="newbie").exists()


# --- Join as me: a signed-in user opening a link ---------------------------------------------


def test_a_signed_in_user_joins_as_themselves_with_one_post(
    project: Project, owner: User, outsider: User
) -> None:
    invite, secret = invite_create(project=project, actor=owner, role="researcher")
    client = signed_in(outsider)
    url = reverse("invite-accept", args=[secret])
    page = client.get(url)
    html = page.content.decode()
    assert page.status_code == 200
    assert "Join Demo as outsider" in html and 'name="join_as" value="outsider"' in html
    assert 'name="password"' not in html

    response = client.post(url, {"join_as": "outsider"})

    assert response.status_code == 302
    assert response["Location"] == reverse("project-home", args=["demo"])
    assert Membership.objects.get(user=outsider, project=project).role == "researcher"
    invite.refresh_from_db()
    assert invite.used_by == outsider and invite.used_at is not None
    event = MembershipEvent.objects.get(action="joined")
    assert (event.actor, event.member, event.role_after) == (owner, outsider, "researcher")
    assert User.objects.count() == 2  # no account was made
    # The invite is used up, for this user and anyone else.
    assert client.post(url, {"join_as": "outsider"}).status_code == 410
    assert Client().post(url, GOOD).status_code == 410


def test_join_as_a_different_account_than_the_page_showed_is_refused(
    project: Project, owner: User, outsider: User
) -> None:
    invite, secret = invite_create(project=project, actor=owner, role="annotator")
    response = signed_in(outsider).post(
        reverse("invite-accept", args=[secret]), {"join_as": "someone-else"}
    )
    assert response.status_code == 400
    assert "opened as &#x27;someone-else&#x27;" in response.content.decode()
    invite.refresh_from_db()
    assert invite.used_at is None
    assert not Membership.objects.filter(user=outsider).exists()


def test_a_member_already_is_told_so_and_the_link_stays_unused(
    project: Project, owner: User, annotator: User
) -> None:
    invite, secret = invite_create(project=project, actor=owner, role="admin")
    url = reverse("invite-accept", args=[secret])
    client = signed_in(annotator)
    assert 'id="invite-member-already"' in client.get(url).content.decode()

    response = client.post(url, {"join_as": "annotator"})

    assert response.status_code == 400
    assert 'id="invite-member-already"' in response.content.decode()
    assert Membership.objects.get(user=annotator, project=project).role == "annotator"
    invite.refresh_from_db()
    assert invite.used_at is None


def test_joining_as_me_needs_a_sign_in_and_a_usable_link(
    project: Project, owner: User, outsider: User
) -> None:
    invite, secret = invite_create(project=project, actor=owner, role="annotator")
    url = reverse("invite-accept", args=[secret])
    anonymous = Client().post(url, {"join_as": "outsider"})
    assert anonymous.status_code == 400
    assert "Sign in first" in anonymous.content.decode()
    assert 'name="password"' in anonymous.content.decode()
    invite.expires_at = timezone.now() - timedelta(seconds=1)
    invite.save(update_fields=["expires_at"])
    expired = signed_in(outsider).post(url, {"join_as": "outsider"})
    assert expired.status_code == 410 and "has expired" in expired.content.decode()
    assert not Membership.objects.filter(user=outsider).exists()


def test_a_signed_in_user_may_still_make_a_new_account(
    project: Project, owner: User, outsider: User
) -> None:
    _, secret = invite_create(project=project, actor=owner, role="annotator")
    url = reverse("invite-accept", args=[secret]) + "?new_account=1"
    client = signed_in(outsider)
    assert 'name="password"' in client.get(url).content.decode()
    assert client.post(url, GOOD).status_code == 302
    assert Membership.objects.get(user__username="newbie", project=project).role == "annotator"
