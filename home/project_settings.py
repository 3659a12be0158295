"""A project's settings page for its admins (name, guidelines; the label schema and
labeling settings have their own page), the deletion of a project, and the page of a
deletion under way, which says what has been removed."""

from __future__ import annotations

from typing import cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from trajectories import selectors
from trajectories.forms import ProjectDeleteForm, ProjectSettingsForm
from trajectories.models import Project, ProjectDeletion
from trajectories.services import DeletionRefused, project_delete_start, project_update

# What only a project admin may do here (the 403 says it).
ADMINS_DO = "change a project's settings"


def _settings_page(
    request: HttpRequest,
    project: Project,
    *,
    form: ProjectSettingsForm | None = None,
    delete_form: ProjectDeleteForm | None = None,
    status: int = 200,
) -> HttpResponse:
    context = {
        "project": project,
        "form": form or ProjectSettingsForm(instance=project),
        "delete_form": delete_form or ProjectDeleteForm(),
        "stats": selectors.project_stats(project),
    }
    return render(request, "home/project_settings.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def project_settings(request: HttpRequest, slug: str) -> HttpResponse:
    project = selectors.project_get_for_admin(request.user, slug, does=ADMINS_DO)
    if request.method != "POST":
        return _settings_page(request, project)
    form = ProjectSettingsForm(request.POST, instance=Project.objects.get(pk=project.pk))
    if not form.is_valid():
        return _settings_page(request, project, form=form, status=400)
    project_update(
        project=project,
        name=form.cleaned_data["name"],
        guidelines=form.cleaned_data["guidelines"],
    )
    messages.success(request, "Settings saved.")
    return redirect("project-settings", slug=project.slug)


@login_required
@require_POST
def project_delete(request: HttpRequest, slug: str) -> HttpResponse:
    """Hide the project now and remove it in the background; the slug must be typed."""
    project = selectors.project_get_for_admin(request.user, slug, does=ADMINS_DO)
    form = ProjectDeleteForm(request.POST)
    if form.is_valid():
        try:
            deletion = project_delete_start(
                project=project,
                actor=cast(User, request.user),
                confirm=form.cleaned_data["confirm"],
            )
        except DeletionRefused as refused:
            form.add_error(refused.field, refused.message)
        else:
            return redirect("project-deletion", pk=deletion.pk)
    return _settings_page(request, project, delete_form=form, status=400)


@login_required
@require_GET
def project_deletion(request: HttpRequest, pk: int) -> HttpResponse:
    """What a deletion has removed so far; for whoever started it (the project's other
    members no longer see the project at all). Polled while it runs."""
    deletion = ProjectDeletion.objects.filter(pk=pk, created_by_id=request.user.pk).first()
    if deletion is None:
        raise Http404("No such deletion.")
    removed = sorted(deletion.removed.items(), key=lambda item: (-item[1], item[0]))
    context = {"deletion": deletion, "removed": removed}
    if request.htmx:  # type: ignore[attr-defined]
        return render(request, "home/_deletion_status.html", context)
    return render(request, "home/project_deletion.html", context)
