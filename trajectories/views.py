"""Browse pages: projects, a project's home, the trajectory list, a trajectory's steps.

Every view fetches through a ``*_for_user`` selector, so anything outside the user's
projects is a 404. HTMX requests get a template partial instead of the whole page.
"""

from __future__ import annotations

from typing import cast

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django_htmx.middleware import HtmxDetails

from labeling.views.common import labeling_surface
from trajectories import selectors, services
from trajectories.forms import ImportUploadForm, TrajectoryFilterForm


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


@login_required
def project_list(request: HtmxHttpRequest) -> HttpResponse:
    projects = selectors.project_list_for_user(request.user)
    return render(request, "trajectories/project_list.html", {"projects": projects})


@login_required
def project_home(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = selectors.project_get_for_user(request.user, slug)
    context = {
        "project": project,
        "role": selectors.membership_role(request.user, project),
        "stats": selectors.project_stats(project),
        "import_batches": selectors.import_batches_recent(project),
    }
    return render(request, "trajectories/project_home.html", context)


@login_required
def trajectory_list(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = selectors.project_get_for_user(request.user, slug)
    form = TrajectoryFilterForm(request.GET)
    rows, next_after = selectors.trajectory_list_page(project, form.filters(), after=form.cursor())
    context = {"project": project, "form": form, "rows": rows, "next_after": next_after}
    if request.htmx:
        # "Load more": the next rows, appended to the table, and the button for the page
        # after them (swapped out of band).
        return render(request, "trajectories/trajectory_list.html#more-rows", context)
    context["model_names"] = selectors.model_names_for_project(project)
    return render(request, "trajectories/trajectory_list.html", context)


@login_required
def trajectory_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    # The trajectory page is the labeling surface: its context (steps with labels, the
    # user's schema, progress, lease and verdict) comes from labeling, in constant queries.
    context = labeling_surface(request, pk)
    return render(request, "trajectories/trajectory_detail.html", context)


@login_required
def step_content(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    step = selectors.step_get_for_user(request.user, pk)
    context = {
        "project": step.trajectory.project,
        "trajectory": step.trajectory,
        "step": step,
        "text": step.content,
        "truncated": False,
    }
    if request.htmx:
        return render(request, "trajectories/step_content.html#step-content", context)
    return render(request, "trajectories/step_content.html", context)


@login_required
def import_new(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = selectors.project_get_for_user(request.user, slug)
    if not selectors.can_manage_data(request.user, project):
        raise PermissionDenied("Only researchers and admins import data.")
    form = ImportUploadForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        try:
            batch = services.import_upload_start(
                project=project,
                user=cast(User, request.user),  # login_required
                source_format=form.cleaned_data["source_format"],
                upload=form.cleaned_data["file"],
                skip_invalid=form.cleaned_data["skip_invalid"],
                mapping=form.cleaned_data["mapping_json"],
            )
        except ValueError as error:
            form.add_error(None, str(error))
        else:
            return redirect("import-detail", pk=batch.pk)
    status = 400 if request.method == "POST" else 200
    return render(
        request, "trajectories/import_new.html", {"project": project, "form": form}, status=status
    )


@login_required
def import_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    batch = selectors.import_batch_get_for_user(request.user, pk)
    context = {"project": batch.project, "batch": batch}
    if request.htmx:
        return render(request, "trajectories/import_detail.html#import-status", context)
    return render(request, "trajectories/import_detail.html", context)
