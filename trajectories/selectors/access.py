"""Who may reach what: every lookup that starts from a request goes through an
``*_for_user`` helper, which raises 404 for anything outside the user's projects; and what
each role may do with a project's data."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.db.models import (
    QuerySet,
)
from django.http import Http404

from trajectories.models import (
    ImportBatch,
    Membership,
    Project,
    Step,
    Trajectory,
)

AnyUser = User | AbstractBaseUser | AnonymousUser


def projects_for_user(user: AnyUser) -> QuerySet[Project]:
    if not user.is_authenticated:
        return Project.objects.none()
    # A project being deleted is gone for everyone at once; a worker removes its rows.
    return Project.objects.filter(memberships__user_id=user.pk, deleting_since__isnull=True)


def membership_role(user: AnyUser, project: Project) -> str | None:
    if not user.is_authenticated:
        return None
    return (
        Membership.objects.filter(user_id=user.pk, project=project)
        .values_list("role", flat=True)
        .first()
    )


def project_get_for_user(user: AnyUser, slug: str) -> Project:
    project = projects_for_user(user).filter(slug=slug).first()
    if project is None:
        raise Http404("No such project.")
    return project


def project_get_for_admin(user: AnyUser, slug: str, *, does: str) -> Project:
    """The project, for its admins: outsiders get 404 (as if it did not exist), other
    members a 403 saying "Only project admins <does>." (a page's or the API's answer)."""
    project = project_get_for_user(user, slug)
    if membership_role(user, project) != Membership.Role.ADMIN:
        raise PermissionDenied(f"Only project admins {does}.")
    return project


def trajectory_get_for_user(user: AnyUser, pk: int) -> Trajectory:
    trajectory = (
        Trajectory.objects.select_related("project")
        .filter(pk=pk, project__in=projects_for_user(user))
        .first()
    )
    if trajectory is None:
        raise Http404("No such trajectory.")
    return trajectory


def step_get_for_user(user: AnyUser, pk: int) -> Step:
    step = (
        Step.objects.select_related("trajectory__project")
        .filter(pk=pk, trajectory__project__in=projects_for_user(user))
        .first()
    )
    if step is None:
        raise Http404("No such step.")
    return step


def import_batch_get_for_user(user: AnyUser, pk: int) -> ImportBatch:
    batch = (
        ImportBatch.objects.select_related("project", "created_by")
        .filter(pk=pk, project__in=projects_for_user(user))
        .first()
    )
    if batch is None:
        raise Http404("No such import.")
    return batch


# Researchers and admins import, score and export; annotators label.
MANAGING_ROLES = frozenset({Membership.Role.RESEARCHER, Membership.Role.ADMIN})


def can_manage_data(user: AnyUser, project: Project) -> bool:
    return membership_role(user, project) in MANAGING_ROLES


def can_download_exports(user: AnyUser, project: Project) -> bool:
    return role_downloads_exports(membership_role(user, project), project)


def projects_hiding_exports(user: AnyUser) -> frozenset[int]:
    """The ids of the user's projects whose exports (files and manifests) the user may
    not read, in one query."""
    if not user.is_authenticated:
        return frozenset()
    memberships = Membership.objects.filter(user_id=user.pk).select_related("project")
    return frozenset(
        m.project_id for m in memberships if not role_downloads_exports(m.role, m.project)
    )


def role_downloads_exports(role: str | None, project: Project) -> bool:
    """Export files carry everyone's labels and the model's scores: in a project that
    hides those from annotators (blind labeling, hidden scores), only researchers and
    admins may read them."""
    settings = project.settings or {}
    hidden = bool(settings.get("blind_labeling") or settings.get("hide_model_scores"))
    return role in MANAGING_ROLES or (not hidden and role is not None)
