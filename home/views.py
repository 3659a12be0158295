"""The project list and a project's home, which gathers each app's numbers: trajectories
and steps, labelled steps, and the scoring and rollout sections (their templates)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from labeling.selectors import labelled_step_count
from trajectories import selectors


@login_required
@require_GET
def project_list(request: HttpRequest) -> HttpResponse:
    projects = selectors.project_list_for_user(request.user)
    return render(request, "home/project_list.html", {"projects": projects})


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
