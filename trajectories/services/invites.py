"""One-time invite links: a project admin makes one with a role; whoever opens it sets a
username and password and joins the project with that role. A link expires after
``INVITE_DAYS`` and works once; only a digest of its secret is stored."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from trajectories.models import Membership, MembershipEvent, MembershipInvite, Project
from trajectories.services.members import MemberError, role_checked

INVITE_DAYS = 7


class InviteUnusable(Exception):
    """The link is unknown, expired or already used; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def invite_create(
    *, project: Project, actor: User, role: str, days: int = INVITE_DAYS
) -> tuple[MembershipInvite, str]:
    """The invite and its secret, which is shown once and never stored."""
    role_checked(role)
    secret = secrets.token_urlsafe(32)
    invite = MembershipInvite.objects.create(
        project=project,
        role=role,
        secret_digest=_digest(secret),
        created_by=actor,
        expires_at=timezone.now() + timedelta(days=days),
    )
    return invite, secret


def invite_revoke(*, invite: MembershipInvite) -> None:
    """Delete an open link: whoever opens it later is told it is not known (404)."""
    invite.delete()


def invite_get_usable(secret: str) -> MembershipInvite:
    """The invite of ``secret`` if it can still be used, else ``InviteUnusable``."""
    invite = (
        MembershipInvite.objects.select_related("project")
        .filter(secret_digest=_digest(secret))
        .first()
    )
    return _usable(invite)


def _usable(invite: MembershipInvite | None) -> MembershipInvite:
    if invite is None:
        raise InviteUnusable("unknown")
    if invite.used_at is not None:
        raise InviteUnusable("used")
    if invite.expires_at <= timezone.now():
        raise InviteUnusable("expired")
    return invite


def invite_accept(*, secret: str, username: str, password: str) -> Membership:
    """A new account named ``username`` with ``password``, a member with the invite's
    role. The invite row is locked, so two people opening one link cannot both join."""
    username = username.strip()
    with transaction.atomic():
        invite = _usable(
            MembershipInvite.objects.select_for_update()
            .select_related("project")
            .filter(secret_digest=_digest(secret))
            .first()
        )
        if User.objects.filter(username__iexact=username).exists():
            raise MemberError("username", f"The username {username!r} is taken; choose another.")
        try:
            User._meta.get_field("username").run_validators(username)
        except ValidationError as error:
            raise MemberError("username", " ".join(error.messages)) from None
        candidate = User(username=username)
        try:
            validate_password(password, user=candidate)
        except ValidationError as error:
            raise MemberError("password", " ".join(error.messages)) from None
        user = User.objects.create_user(username=username, password=password)
        return _join(invite, user)


def invite_join(*, secret: str, user: User) -> Membership:
    """``user``, already signed in, joins with the invite's role ("join as me"); the
    invite is used up. A member of the project already is refused and uses nothing up."""
    with transaction.atomic():
        invite = _usable(
            MembershipInvite.objects.select_for_update()
            .select_related("project")
            .filter(secret_digest=_digest(secret))
            .first()
        )
        current = Membership.objects.filter(user=user, project=invite.project).first()
        if current is not None:
            raise MemberError(
                "join_as",
                f"You are a member of {invite.project.name} already ({current.role});"
                " the link is left for someone else.",
            )
        return _join(invite, user)


def _join(invite: MembershipInvite, user: User) -> Membership:
    """The membership the (locked, usable) invite grants, the invite used up, the event
    recorded."""
    membership = Membership.objects.create(user=user, project=invite.project, role=invite.role)
    invite.used_at = timezone.now()
    invite.used_by = user
    invite.save(update_fields=["used_at", "used_by"])
    MembershipEvent.objects.create(
        project=invite.project,
        actor=invite.created_by,
        member=user,
        member_username=user.get_username(),
        action=MembershipEvent.Action.JOINED,
        role_after=invite.role,
    )
    return membership
