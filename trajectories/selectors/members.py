"""A project's members, their recorded changes and open invites."""

from __future__ import annotations

from django.db.models import (
    QuerySet,
)
from django.utils import timezone

from trajectories.models import (
    Membership,
    MembershipEvent,
    MembershipInvite,
    Project,
)


def project_members(project: Project) -> QuerySet[Membership]:
    return (
        Membership.objects.filter(project=project).select_related("user").order_by("user__username")
    )


def membership_events_recent(project: Project, limit: int = 200) -> QuerySet[MembershipEvent]:
    """The project's latest member changes, newest first."""
    return MembershipEvent.objects.filter(project=project).select_related("actor")[:limit]


def invites_pending(project: Project) -> QuerySet[MembershipInvite]:
    """The project's invite links that can still be used, newest first."""
    return MembershipInvite.objects.filter(
        project=project, used_at__isnull=True, expires_at__gt=timezone.now()
    ).select_related("created_by")
