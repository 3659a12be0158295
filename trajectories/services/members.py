"""Writes for a project's members, made by its admins on the members page: add an
existing user with a role, change a role, remove. Each change is recorded as a
``MembershipEvent``. A project always keeps one admin: the last one can be neither
removed nor demoted."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from trajectories.models import Membership, MembershipEvent, Project


class MemberError(Exception):
    """A refused change, with the form field it is about."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def role_checked(role: str) -> str:
    if role not in Membership.Role.values:
        raise MemberError("role", f"{role!r} is not a role (use {', '.join(Membership.Role)}).")
    return role


def _event(
    *, membership: Membership, actor: User | None, action: str, before: str, after: str
) -> None:
    MembershipEvent.objects.create(
        project_id=membership.project_id,
        actor=actor,
        member_id=membership.user_id,
        member_username=membership.user.get_username(),
        action=action,
        role_before=before,
        role_after=after,
    )


def _refuse_losing_the_last_admin(membership: Membership) -> None:
    """Called with the change about to take ``membership`` out of the admins. The
    project's admin rows are locked, so two admins demoting each other at once cannot
    both succeed."""
    if membership.role != Membership.Role.ADMIN:
        return
    admins = list(
        Membership.objects.select_for_update()
        .filter(project_id=membership.project_id, role=Membership.Role.ADMIN)
        .values_list("pk", flat=True)
    )
    if admins == [membership.pk]:
        name = membership.user.get_username()
        raise MemberError(
            "role", f"{name} is the project's last admin: make another member admin first."
        )


def member_add(*, project: Project, actor: User, username: str, role: str) -> Membership:
    role_checked(role)
    user = User.objects.filter(username=username.strip(), is_active=True).first()
    if user is None:
        raise MemberError("username", f"No user is named {username.strip()!r}.")
    with transaction.atomic():
        membership, created = Membership.objects.get_or_create(
            project=project, user=user, defaults={"role": role}
        )
        if not created:
            raise MemberError(
                "username", f"{user.get_username()} is already a member ({membership.role})."
            )
        _event(
            membership=membership,
            actor=actor,
            action=MembershipEvent.Action.ADDED,
            before="",
            after=role,
        )
    return membership


def member_role_set(*, membership: Membership, actor: User, role: str) -> Membership:
    role_checked(role)
    with transaction.atomic():
        membership = (
            Membership.objects.select_for_update().select_related("user").get(pk=membership.pk)
        )
        if membership.role == role:
            return membership
        if role != Membership.Role.ADMIN:
            _refuse_losing_the_last_admin(membership)
        before = membership.role
        membership.role = role
        membership.save(update_fields=["role"])
        _event(
            membership=membership,
            actor=actor,
            action=MembershipEvent.Action.ROLE_CHANGED,
            before=before,
            after=role,
        )
    return membership


def member_remove(*, membership: Membership, actor: User) -> None:
    with transaction.atomic():
        membership = (
            Membership.objects.select_for_update().select_related("user").get(pk=membership.pk)
        )
        _refuse_losing_the_last_admin(membership)
        _event(
            membership=membership,
            actor=actor,
            action=MembershipEvent.Action.REMOVED,
            before=membership.role,
            after="",
        )
        membership.delete()
