"""Browse pages: projects, a project's home, the trajectory list, a trajectory's steps.

Every view fetches through a ``*_for_user`` selector, so anything outside the user's
projects is a 404. HTMX requests get a template partial instead of the whole page.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django_htmx.middleware import HtmxDetails

from trajectories import selectors
from trajectories.forms import TrajectoryFilterForm


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
    trajectory = selectors.trajectory_get_for_user(request.user, pk)
    context = {
        "project": trajectory.project,
        "trajectory": trajectory,
        "steps": selectors.steps_for_trajectory_page(trajectory),
        "preview_chars": selectors.STEP_PREVIEW_CHARS,
    }
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
