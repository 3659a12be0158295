"""Browse pages: projects, a project's home, the trajectory list, a trajectory's steps.

Every view fetches through a ``*_for_user`` selector, so anything outside the user's
projects is a 404. HTMX requests get a template partial instead of the whole page.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET
from django_htmx.middleware import HtmxDetails

from labeling.views.common import labeling_surface
from trajectories import alignment, prefix_tree, selectors, services
from trajectories.forms import ExportForm, ImportUploadForm, SelectionForm, TrajectoryFilterForm
from trajectories.models import ExportJob, Trajectory
from trajectories.services import exports
from trajectories.services.selections import selection_delete, selection_save


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


@login_required
@require_GET
def project_list(request: HtmxHttpRequest) -> HttpResponse:
    projects = selectors.project_list_for_user(request.user)
    return render(request, "trajectories/project_list.html", {"projects": projects})


@login_required
@require_GET
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
@require_GET
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
@require_GET
def trajectory_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    # The trajectory page is the labeling surface: its context (steps with labels, the
    # user's schema, progress, lease and verdict) comes from labeling, in constant queries.
    context = labeling_surface(request, pk)
    return render(request, "trajectories/trajectory_detail.html", context)


@login_required
@require_GET
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
@require_GET
def import_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    batch = selectors.import_batch_get_for_user(request.user, pk)
    context = {"project": batch.project, "batch": batch}
    if request.htmx:
        return render(request, "trajectories/import_detail.html#import-status", context)
    return render(request, "trajectories/import_detail.html", context)


@login_required
@require_GET
def trajectory_compare(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Debug a rollout: side by side with another rollout of the same task (by default a
    success sharing the longest prefix), aligned step by step, divergence marked."""
    trajectory = selectors.trajectory_get_for_user(request.user, pk)
    other_id = request.GET.get("with", "")
    if other_id.isdigit():
        other: Trajectory | None = selectors.trajectory_get_for_user(request.user, int(other_id))
        if other is not None and other.project_id != trajectory.project_id:
            raise Http404("Compare rollouts of one project.")
    else:
        other = selectors.comparison_partner(trajectory)
    # Annotators may be labeling blind; only researchers and admins see everyone's labels.
    show_labels = selectors.can_manage_data(request.user, trajectory.project)
    context: dict[str, object] = {
        "project": trajectory.project,
        "trajectory": trajectory,
        "other": other,
        "rollouts": selectors.rollouts_of_task(trajectory),
        "show_labels": show_labels,
        "preview_chars": selectors.STEP_PREVIEW_CHARS,
    }
    if other is not None:
        left = selectors.compare_steps(trajectory, with_labels=show_labels)
        right = selectors.compare_steps(other, with_labels=show_labels)
        result = alignment.align(_align_input(left), _align_input(right))
        left_errors = selectors.first_errors(left)
        right_errors = selectors.first_errors(right)
        context["alignment"] = result
        context["shared_rows"] = list(zip(left, right, strict=False))[: result.shared_prefix]
        context["rows"] = [
            (
                row.kind,
                None if row.left is None else left[row.left],
                None if row.right is None else right[row.right],
            )
            for row in result.rows
            if row.kind != "shared"
        ]
        context["first_errors"] = [
            (source, left_errors.get(source), right_errors.get(source))
            for source in sorted(set(left_errors) | set(right_errors))
        ]
    return render(request, "trajectories/compare.html", context)


def _align_input(steps: list[selectors.CompareStep]) -> list[alignment.AlignStep]:
    return [
        alignment.AlignStep(s.index, s.prefix_hash, s.role, s.content, s.tool_name, s.tool_args)
        for s in steps
    ]


@login_required
@require_GET
def task_tree(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """A task's rollouts merged where their steps are identical, with the Monte Carlo
    value (mean outcome, Beta-binomial interval) of every prefix."""
    project = selectors.project_get_for_user(request.user, slug)
    task_key = request.GET.get("task", "")
    rollouts = selectors.task_rollouts(project, task_key) if task_key else None
    rows = []
    if rollouts and rollouts.trajectories:
        for segment in prefix_tree.segments(rollouts.hashes, rollouts.outcomes):
            steps = rollouts.steps[segment.rollout]
            rows.append(
                {
                    "segment": segment,
                    "first": steps[segment.start_index],
                    "last": steps[segment.start_index + segment.length - 1],
                    "trajectory": rollouts.trajectories[segment.rollout],
                }
            )
    context = {"project": project, "task_key": task_key, "rollouts": rollouts, "rows": rows}
    return render(request, "trajectories/task_tree.html", context)


@login_required
def export_list(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """The project's exports, and a form for a new one (researchers and admins)."""
    project = selectors.project_get_for_user(request.user, slug)
    can_export = selectors.can_manage_data(request.user, project)
    form = ExportForm(request.POST or None, project=project, initial=request.GET.dict())
    status = 200
    if request.method == "POST":
        if not can_export:
            raise PermissionDenied("Only researchers and admins export data.")
        if form.is_valid():
            data = form.cleaned_data
            try:
                export_request = exports.export_request_build(
                    project=project,
                    format=data["format"],
                    labels=data["labels"],
                    neutral=data["neutral"],
                    selection=data["selection"],
                    split=data["split"],
                    seed=data["seed"] or 0,
                    container=data["container"],
                    compress=data["compress"],
                    threshold=data["threshold"] if data["threshold"] is not None else 0.5,
                    scorer=data["scorer"],
                    credit_run=data["credit_run"],
                )
            except ValueError as error:
                form.add_error(None, str(error))
            else:
                job = exports.export_start(
                    project=project, user=cast(User, request.user), request=export_request
                )
                return redirect("export-detail", pk=job.pk)
        status = 400
    jobs = project.export_jobs.defer("manifest").order_by("-created_at")[:50]
    context = {"project": project, "form": form, "jobs": jobs, "can_export": can_export}
    return render(request, "trajectories/export_list.html", context, status=status)


@login_required
def selection_list(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """The project's saved selections, and a form to save one (researchers and admins),
    filled from the trajectory list's query string."""
    project = selectors.project_get_for_user(request.user, slug)
    can_manage = selectors.can_manage_data(request.user, project)
    form = SelectionForm(request.POST or None, initial=request.GET.dict())
    status = 200
    if request.method == "POST":
        if not can_manage:
            raise PermissionDenied("Only researchers and admins save selections.")
        if form.is_valid():
            try:
                selection_save(
                    project=project,
                    name=form.cleaned_data["name"],
                    filters=form.filters(),
                    user=cast(User, request.user),
                )
            except ValueError as error:
                form.add_error(None, str(error))
            else:
                return redirect("selection-list", slug=project.slug)
        status = 400
    context = {
        "project": project,
        "form": form,
        "can_manage": can_manage,
        "selections": selectors.selections_for_project(project),
    }
    return render(request, "trajectories/selection_list.html", context, status=status)


@login_required
def selection_remove(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    selection = selectors.selection_get_for_user(request.user, pk)
    if request.method != "POST":
        return redirect("selection-list", slug=selection.project.slug)
    if not selectors.can_manage_data(request.user, selection.project):
        raise PermissionDenied("Only researchers and admins delete selections.")
    selection_delete(selection=selection)
    return redirect("selection-list", slug=selection.project.slug)


@login_required
def export_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    job = selectors.export_job_get_for_user(request.user, pk)
    if request.method == "POST":
        if not selectors.can_manage_data(request.user, job.project):
            raise PermissionDenied("Only researchers and admins cancel exports.")
        job = exports.export_cancel(job=job)
    # Once per poll of a running export: the role is read once for both.
    role = selectors.membership_role(request.user, job.project)
    context = {
        "project": job.project,
        "job": job,
        "can_cancel": role in selectors.MANAGING_ROLES,
        "can_download": selectors.role_downloads_exports(role, job.project),
    }
    if request.htmx:
        return render(request, "trajectories/export_detail.html#export-status", context)
    return render(request, "trajectories/export_detail.html", context)


@login_required
@require_GET
def export_download(request: HtmxHttpRequest, pk: int, name: str) -> FileResponse:
    job = selectors.export_job_get_for_user(request.user, pk)
    if not selectors.can_download_exports(request.user, job.project):
        raise PermissionDenied("This project hides labels or model scores from annotators.")
    names = {f["name"] for f in job.files} | {"manifest.json"}
    if job.status != ExportJob.Status.DONE or name not in names:
        raise Http404("No such file in this export.")
    path = Path(job.out_dir) / name
    if not path.is_file():
        raise Http404("The file is gone.")
    return FileResponse(path.open("rb"), as_attachment=True, filename=name)
