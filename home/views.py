"""The project list and a project's home, which gathers each app's numbers: trajectories
and steps, labelled steps, and the scoring and rollout sections (their templates)."""

from __future__ import annotations

from typing import cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from labeling.selectors import labelled_step_count
from trajectories import selectors
from trajectories.forms import ProjectCreateForm
from trajectories.services import project_create, project_creation_allowed


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
            project = project_create(
                owner=cast(User, request.user),
                slug=form.cleaned_data["slug"],
                name=form.cleaned_data["name"],
                guidelines=form.cleaned_data["guidelines"],
            )
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
        "labelled_steps": labelled_step_count(project),
        "import_batches": selectors.import_batches_recent(project),
    }
    return render(request, "home/project_home.html", context)
