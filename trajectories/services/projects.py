"""Writes for projects and their members."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import IntegrityError, transaction

# The prefix is the formats' (Django-free) own; named here too for the services' users.
from trajectories.formats.base import IMPORTED_ANNOTATOR_PREFIX as IMPORTED_ANNOTATOR_PREFIX
from trajectories.formats.base import imported_annotator_name
from trajectories.models import Membership, MembershipEvent, Project
from trajectories.services.members import MemberError, member_add, member_role_set

# What higher apps add to a new project inside project_create's transaction (labeling:
# the default label schema), registered from their AppConfig.ready() by name, run in the
# order they register.
ProjectHook = Callable[[Project], None]
_PROJECT_CREATED: dict[str, ProjectHook] = {}


def project_created_register(name: str) -> Callable[[ProjectHook], ProjectHook]:
    def register(hook: ProjectHook) -> ProjectHook:
        _PROJECT_CREATED[name] = hook
        return hook

    return register


def project_creation_allowed(user: User | AnonymousUser) -> bool:
    """Whether ``user`` may create projects: ``STEPSCOPE_PROJECT_CREATORS`` is ``any``
    (every signed-in user) or ``staff``."""
    if not user.is_authenticated or not user.is_active:
        return False
    return settings.STEPSCOPE_PROJECT_CREATORS == "any" or user.is_staff


class SlugTaken(MemberError):
    """A new project's slug is another project's, or a project's being deleted."""

    def __init__(self, message: str) -> None:
        super().__init__("slug", message)


def project_slug_check(slug: str) -> None:
    """Raise :class:`SlugTaken` if ``slug`` is in use. A project being deleted keeps its
    slug until its last row is gone (links to it must not reach a new project meanwhile),
    and says so."""
    taken = Project.objects.filter(slug=slug).values("deleting_since").first()
    if taken is None:
        return
    if taken["deleting_since"] is not None:
        raise SlugTaken(
            f"The slug {slug!r} belongs to a project that is being deleted; it is free once"
            " the deletion finishes."
        )
    raise SlugTaken(f"A project with the slug {slug!r} exists already; choose another.")


def project_create(
    *, slug: str, name: str, owner: User | None = None, guidelines: str = ""
) -> Project:
    """A project with what the apps add to one (the default ternary label schema);
    ``owner`` becomes its admin. A slug in use (a project being deleted included) is
    :class:`SlugTaken`."""
    project_slug_check(slug)
    with transaction.atomic():
        try:
            with transaction.atomic():
                project = Project.objects.create(slug=slug, name=name, guidelines=guidelines)
        except IntegrityError:
            # Taken between the check and the insert.
            project_slug_check(slug)
            raise
        for hook in _PROJECT_CREATED.values():
            hook(project)
        if owner is not None:
            Membership.objects.create(user=owner, project=project, role=Membership.Role.ADMIN)
            MembershipEvent.objects.create(
                project=project,
                actor=owner,
                member=owner,
                member_username=owner.get_username(),
                action=MembershipEvent.Action.ADDED,
                role_after=Membership.Role.ADMIN,
            )
    return project


def project_owner_set(*, project: Project, user: User) -> Membership:
    """Make ``user`` an admin of ``project``: added as one, or a member's role raised
    (the operator's ``import_trajectories --owner``, with no admin to act in the UI)."""
    membership = Membership.objects.filter(project=project, user=user).first()
    if membership is None:
        return member_add(
            project=project, actor=user, username=user.get_username(), role=Membership.Role.ADMIN
        )
    return member_role_set(membership=membership, actor=user, role=Membership.Role.ADMIN)


def project_update(
    *, project: Project, name: str | None = None, guidelines: str | None = None
) -> Project:
    """Change a project's name or guidelines (what is given); the slug stays."""
    fields = []
    if name is not None:
        if not name.strip():
            raise ValueError("name: a project needs a name")
        project.name = name.strip()[:200]
        fields.append("name")
    if guidelines is not None:
        project.guidelines = guidelines
        fields.append("guidelines")
    if fields:
        project.save(update_fields=fields)
    return project


def membership_set(*, project: Project, user: User, role: str) -> Membership:
    membership, _ = Membership.objects.update_or_create(
        project=project, user=user, defaults={"role": role}
    )
    return membership


def imported_annotator(name: str) -> User:
    """The non-login user that stands for a label source such as ``import:processbench``.

    Names without the ``import:`` prefix get it, so an imported file can never attribute
    labels to a real account.
    """
    name = imported_annotator_name(name)
    user, created = User.objects.get_or_create(username=name[:150], defaults={"is_active": False})
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user
