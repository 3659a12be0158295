"""The followed folders page: a project's admins add the folders a trainer writes into,
for the worker to import from as they grow (``trajectories.services.follow``), and remove
them. Every member sees them, and how far each file got, on the project's home page."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from trajectories import selectors
from trajectories.forms import FollowSourceForm
from trajectories.models import FollowSource, Project
from trajectories.services.follow import FollowRefused, follow_source_add, follow_source_remove

# What only a project admin may do here (the 403 says it).
ADMINS_DO = "choose the folders a project follows"


def _page(
    request: HttpRequest, project: Project, form: FollowSourceForm | None = None, status: int = 200
) -> HttpResponse:
    context = {
        "project": project,
        "form": form or FollowSourceForm(),
        "follow_sources": selectors.follow_sources_for_project(project),
        "roots": settings.STEPSCOPE_FOLLOW_ROOTS,
        "manage": True,
    }
    return render(request, "home/follow_sources.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def follow_sources(request: HttpRequest, slug: str) -> HttpResponse:
    project = selectors.project_get_for_admin(request.user, slug, does=ADMINS_DO)
    if request.method != "POST":
        return _page(request, project)
    form = FollowSourceForm(request.POST)
    if not form.is_valid():
        return _page(request, project, form, status=400)
    try:
        source = follow_source_add(
            project=project,
            path=form.cleaned_data["path"],
            source_format=form.cleaned_data["source_format"],
            skip_invalid=form.cleaned_data["skip_invalid"],
        )
    except FollowRefused as refused:
        form.add_error(refused.field, refused.message)
        return _page(request, project, form, status=400)
    messages.success(request, f"Following {source.path}; the worker looks every few seconds.")
    return redirect("follow-sources", slug=project.slug)


@login_required
@require_POST
def follow_source_delete(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    project = selectors.project_get_for_admin(request.user, slug, does=ADMINS_DO)
    source = get_object_or_404(FollowSource, pk=pk, project=project)
    follow_source_remove(source=source)
    messages.success(request, f"No longer following {source.path}.")
    return redirect("follow-sources", slug=project.slug)
