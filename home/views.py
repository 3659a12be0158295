"""The project list (and the form that creates a project), a project's home, which
gathers each app's numbers: trajectories and steps, labelled steps, and the scoring and
rollout sections (their templates), and the members page of the project's admins."""

from __future__ import annotations

from typing import cast

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from evaluation.kept import summary_kept
from home import summary
from trajectories import selectors, services
from trajectories.forms import InviteAcceptForm, MemberAddForm, MemberRoleForm, ProjectCreateForm
from trajectories.models import Membership, MembershipInvite, Project
from trajectories.services import (
    INVITE_DAYS,
    InviteUnusable,
    MemberError,
    SlugTaken,
    invite_accept,
    invite_create,
    invite_get_usable,
    invite_join,
    member_add,
    member_remove,
    member_role_set,
    project_create,
    project_creation_allowed,
)

# What only a project admin may do here (the 403 says it).
ADMINS_DO = "manage members"


@login_required
@require_http_methods(["GET", "POST"])
def project_list(request: HttpRequest) -> HttpResponse:
    """The user's projects, and the form that creates one (its creator becomes its admin)."""
    may_create = project_creation_allowed(request.user)
    form = ProjectCreateForm(request.POST if request.method == "POST" else None)
    if request.method == "POST":
        if not may_create:
            raise PermissionDenied("Only staff create projects here.")
        if form.is_valid():
            try:
                project = project_create(
                    owner=cast(User, request.user),
                    slug=form.cleaned_data["slug"],
                    name=form.cleaned_data["name"],
                    guidelines=form.cleaned_data["guidelines"],
                )
            except SlugTaken as taken:  # taken since the form's check
                form.add_error("slug", taken.message)
            else:
                messages.success(request, f"Project {project.name!r} created; you are its admin.")
                return redirect("project-home", slug=project.slug)
    # A refused form re-renders with its errors.
    context = {
        "projects": selectors.project_list_for_user(request.user),
        "form": form if may_create else None,
    }
    return render(request, "home/project_list.html", context)


@login_required
@require_GET
def project_home(request: HttpRequest, slug: str) -> HttpResponse:
    project = selectors.project_get_for_user(request.user, slug)
    context = {
        "project": project,
        "role": selectors.membership_role(request.user, project),
        "stats": selectors.project_stats(project),
        # A small project's counts are made here and not kept: the home writes nothing.
        "kept": summary_kept(project, summary.PAGE, {}, keep_small=False),
        "import_batches": selectors.import_batches_recent(project),
        "follow_sources": selectors.follow_sources_for_project(project),
    }
    return render(request, "home/project_home.html", context)


def _members_page(
    request: HttpRequest,
    project: Project,
    *,
    form: MemberAddForm | None = None,
    error: str = "",
    invite_link: str = "",
    status: int = 200,
) -> HttpResponse:
    context = {
        "project": project,
        "members": selectors.project_members(project),
        "events": selectors.membership_events_recent(project),
        "invites": selectors.invites_pending(project),
        "form": form or MemberAddForm(),
        "roles": Membership.Role.choices,
        "invite_days": INVITE_DAYS,
        "invite_link": invite_link,
        "error": error,
    }
    return render(request, "home/members.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def member_list(request: HttpRequest, slug: str) -> HttpResponse:
    """The members and their changes; the form adds an existing user with a role."""
    project = selectors.project_get_for_admin(request.user, slug, does=ADMINS_DO)
    if request.method != "POST":
        return _members_page(request, project)
    form = MemberAddForm(request.POST)
    if form.is_valid():
        try:
            membership = member_add(
                project=project,
                actor=cast(User, request.user),
                username=form.cleaned_data["username"],
                role=form.cleaned_data["role"],
            )
        except MemberError as error:
            form.add_error(error.field, error.message)
        else:
            name = membership.user.get_username()
            messages.success(request, f"{name} added as {membership.role}.")
            return redirect("member-list", slug=project.slug)
    return _members_page(request, project, form=form, status=400)


def _after_change(request: HttpRequest, project: Project) -> HttpResponse:
    """Back to the members page, or to the project if the admin gave up their own role."""
    if selectors.membership_role(request.user, project) == Membership.Role.ADMIN:
        return redirect("member-list", slug=project.slug)
    if selectors.membership_role(request.user, project) is not None:
        return redirect("project-home", slug=project.slug)
    return redirect("project-list")


@login_required
@require_POST
def member_role(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    project = selectors.project_get_for_admin(request.user, slug, does=ADMINS_DO)
    membership = get_object_or_404(
        Membership.objects.select_related("user"), pk=pk, project=project
    )
    form = MemberRoleForm(request.POST)
    if not form.is_valid():
        roles = ", ".join(Membership.Role.values)
        return _members_page(request, project, error=f"role: choose one of {roles}.", status=400)
    try:
        membership = member_role_set(
            membership=membership, actor=cast(User, request.user), role=form.cleaned_data["role"]
        )
    except MemberError as error:
        return _members_page(request, project, error=f"{error.field}: {error.message}", status=400)
    messages.success(request, f"{membership.user.get_username()} is now {membership.role}.")
    return _after_change(request, project)


@login_required
@require_POST
def member_remove_view(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    project = selectors.project_get_for_admin(request.user, slug, does=ADMINS_DO)
    membership = get_object_or_404(
        Membership.objects.select_related("user"), pk=pk, project=project
    )
    try:
        member_remove(membership=membership, actor=cast(User, request.user))
    except MemberError as error:
        return _members_page(request, project, error=f"{error.field}: {error.message}", status=400)
    messages.success(request, f"{membership.user.get_username()} removed from the project.")
    return _after_change(request, project)


@login_required
@require_POST
def invite_new(request: HttpRequest, slug: str) -> HttpResponse:
    """A one-time invite link with a role, shown once on the members page."""
    project = selectors.project_get_for_admin(request.user, slug, does=ADMINS_DO)
    form = MemberRoleForm(request.POST)
    if not form.is_valid():
        roles = ", ".join(Membership.Role.values)
        return _members_page(request, project, error=f"role: choose one of {roles}.", status=400)
    _, secret = invite_create(
        project=project, actor=cast(User, request.user), role=form.cleaned_data["role"]
    )
    link = request.build_absolute_uri(reverse("invite-accept", args=[secret]))
    return _members_page(request, project, invite_link=link, status=201)


@login_required
@require_POST
def invite_revoke(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """Deletes an open link: whoever opens it later is told it is not known."""
    project = selectors.project_get_for_admin(request.user, slug, does=ADMINS_DO)
    invite = get_object_or_404(MembershipInvite, pk=pk, project=project, used_at__isnull=True)
    services.invite_revoke(invite=invite)
    messages.success(request, f"The {invite.role} invite link no longer works.")
    return redirect("member-list", slug=project.slug)


_UNUSABLE = {
    "unknown": "This invite link is not known. Check that you copied all of it.",
    "used": "This invite link has already been used; each link works once.",
    "expired": "This invite link has expired.",
}


def _unusable(request: HttpRequest, unusable: InviteUnusable) -> HttpResponse:
    context = {"message": _UNUSABLE[unusable.reason], "reason": unusable.reason}
    status = 404 if unusable.reason == "unknown" else 410
    return render(request, "home/invite_unusable.html", context, status=status)


def _welcome(request: HttpRequest, membership: Membership) -> HttpResponse:
    messages.success(
        request, f"Welcome, {membership.user.get_username()}: you are {membership.role}."
    )
    return redirect("project-home", slug=membership.project.slug)


@require_http_methods(["GET", "POST"])
def invite_accept_view(request: HttpRequest, secret: str) -> HttpResponse:
    """Open to anyone with the link. Signed out: choose a username and password, join,
    signed in. Signed in: join as yourself with one POST (``join_as`` names the account
    the page was shown to, so a page left open across a change of account joins no one
    by surprise)."""
    try:
        invite = invite_get_usable(secret)
    except InviteUnusable as unusable:
        return _unusable(request, unusable)
    page: dict[str, object] = {"invite": invite, "invited_project": invite.project}
    if request.method == "POST" and "join_as" in request.POST:
        return _invite_join(request, secret, page)
    form = InviteAcceptForm(request.POST if request.method == "POST" else None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                membership = invite_accept(
                    secret=secret,
                    username=form.cleaned_data["username"],
                    password=form.cleaned_data["password"],
                )
            except InviteUnusable as unusable:
                # Used or expired between the page and the post (it was known then).
                context = {"message": _UNUSABLE[unusable.reason], "reason": unusable.reason}
                return render(request, "home/invite_unusable.html", context, status=410)
            except MemberError as error:
                form.add_error(error.field, error.message)
            else:
                login(request, membership.user, backend="django.contrib.auth.backends.ModelBackend")
                return _welcome(request, membership)
        status = 400
    page["form"] = form
    if request.user.is_authenticated and "new_account" not in request.GET:
        page["membership"] = Membership.objects.filter(
            user=request.user, project=invite.project
        ).first()
        return render(request, "home/invite_join.html", page, status=status)
    return render(request, "home/invite_accept.html", page, status=status)


def _invite_join(request: HttpRequest, secret: str, page: dict[str, object]) -> HttpResponse:
    """The "join as me" POST: the signed-in user becomes a member; the invite is used."""
    user = request.user
    wanted = request.POST.get("join_as", "")
    error = ""
    if not user.is_authenticated:
        error = "Sign in first to join as yourself, or choose a username and password below."
    elif wanted != user.get_username():
        error = (
            f"This page was opened as {wanted!r}, but you are signed in as"
            f" {user.get_username()!r}: reload it and join again."
        )
    else:
        try:
            membership = invite_join(secret=secret, user=cast(User, user))
        except InviteUnusable as unusable:
            return _unusable(request, unusable)
        except MemberError as refused:
            error = refused.message
        else:
            return _welcome(request, membership)
    page["join_error"] = error
    if not user.is_authenticated:
        page["form"] = InviteAcceptForm()
        return render(request, "home/invite_accept.html", page, status=400)
    project = cast(Project, page["invited_project"])
    page["membership"] = Membership.objects.filter(user=user, project=project).first()
    return render(request, "home/invite_join.html", page, status=400)
