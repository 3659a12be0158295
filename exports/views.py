"""The export and selection pages: a project's exports and a form for a new one, an
export's progress and files, saved selections.

Every view fetches through a ``*_for_user`` selector, so anything outside the user's
projects is a 404."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from exports import services
from exports.forms import ExportForm, SelectionForm
from exports.models import BatchVersion, ExportJob
from exports.selectors import (
    batch_diff,
    batch_get_for_user,
    batch_versions,
    batches_for_project,
    export_job_get_for_user,
    selection_get_for_user,
    selections_for_project,
)
from stepscope.web import HtmxHttpRequest
from trajectories import selectors
from trajectories.models import Project


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
        plan = _export_plan(project, form)
        if plan is not None:
            job = services.export_start(
                plan=plan, user=cast(User, request.user), batch=form.cleaned_data["batch"]
            )
            return redirect("export-detail", pk=job.pk)
        status = 400
    jobs = (
        project.export_jobs.defer("manifest")
        .select_related("batch", "batch_version")
        .order_by("-created_at")[:50]
    )
    context = {
        "project": project,
        "form": form,
        "kept": form.kept,
        "jobs": jobs,
        "can_export": can_export,
        "batches": batches_for_project(project),
    }
    return render(request, "exports/export_list.html", context, status=status)


@login_required
@require_GET
def export_preview(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """What the export form's choices would give (counts and the first records), built
    by the export's own reading and writing code on a sample; the form asks for it on
    every change. Researchers and admins, as for exporting: the records hold labels."""
    project = selectors.project_get_for_user(request.user, slug)
    if not selectors.can_manage_data(request.user, project):
        raise PermissionDenied("Only researchers and admins export data.")
    # The preview counts only what is chosen (services.export_preview): the choices'
    # counts are the export page's, not asked again on every change of the form.
    form = ExportForm(request.GET, project=project, counted=False)
    preview = None
    error = ""
    plan = _export_plan(project, form)
    if plan is not None:
        try:
            preview = services.export_preview(plan)
        except ValueError as problem:
            error = str(problem)
    context = {
        "project": project,
        "form": form,
        "preview": preview,
        "error": error,
        "into_batch": _into_batch(project, form),
    }
    return render(request, "exports/export_list.html#export-preview", context)


def _into_batch(project: Project, form: ExportForm) -> dict[str, object] | None:
    """Where the export would go: the batch named and the version it would become."""
    name = form.cleaned_data.get("batch") if form.is_valid() else None
    if not name:
        return None
    batch = next((b for b in batches_for_project(project) if b.name == name), None)
    latest = batch.latest if batch is not None else None  # type: ignore[attr-defined]
    return {"name": name, "new": batch is None, "version": (latest or 0) + 1}


def _export_plan(project: Project, form: ExportForm) -> services.ExportPlan | None:
    """The form's export, planned, or None with the form's errors said."""
    if not form.is_valid():
        return None
    data = form.cleaned_data
    try:
        return services.export_plan_build(
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
            options=form.export_options(),
        )
    except ValueError as error:
        form.add_error(None, str(error))
        return None


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
                services.selection_save(
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
        "selections": selections_for_project(project),
    }
    return render(request, "exports/selection_list.html", context, status=status)


@login_required
def selection_remove(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    selection = selection_get_for_user(request.user, pk)
    if request.method != "POST":
        return redirect("selection-list", slug=selection.project.slug)
    if not selectors.can_manage_data(request.user, selection.project):
        raise PermissionDenied("Only researchers and admins delete selections.")
    services.selection_delete(selection=selection)
    return redirect("selection-list", slug=selection.project.slug)


@login_required
def export_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    job = export_job_get_for_user(request.user, pk)
    if request.method == "POST":
        if not selectors.can_manage_data(request.user, job.project):
            raise PermissionDenied("Only researchers and admins cancel exports.")
        job = services.export_cancel(job=job)
    # Once per poll of a running export: the role is read once for both.
    role = selectors.membership_role(request.user, job.project)
    context = {
        "project": job.project,
        "job": job,
        "version": BatchVersion.objects.filter(export=job).first() if job.batch_id else None,
        "can_cancel": role in selectors.MANAGING_ROLES,
        "can_download": selectors.role_downloads_exports(role, job.project),
    }
    if request.htmx:
        return render(request, "exports/export_detail.html#export-status", context)
    return render(request, "exports/export_detail.html", context)


@login_required
@require_GET
def export_download(request: HtmxHttpRequest, pk: int, name: str) -> FileResponse:
    job = export_job_get_for_user(request.user, pk)
    if not selectors.can_download_exports(request.user, job.project):
        raise PermissionDenied("This project hides labels or model scores from annotators.")
    names = {f["name"] for f in job.files} | {"manifest.json"}
    if job.status != ExportJob.Status.DONE or name not in names:
        raise Http404("No such file in this export.")
    path = Path(job.out_dir) / name
    if not path.is_file():
        raise Http404("The file is gone.")
    return FileResponse(path.open("rb"), as_attachment=True, filename=name)


@login_required
@require_GET
def batch_list(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """The project's batches, each with its versions and the newest."""
    project = selectors.project_get_for_user(request.user, slug)
    context = {"project": project, "batches": batches_for_project(project)}
    return render(request, "exports/batch_list.html", context)


@login_required
@require_GET
def batch_detail(request: HtmxHttpRequest, slug: str, name: str) -> HttpResponse:
    """A batch's versions, newest first, and what changed between two of them
    (``?from=1&to=2``; by default the newest and the one before). The diff shows labels:
    for those who may read the project's exports."""
    batch = batch_get_for_user(request.user, slug, name)
    versions = batch_versions(batch)
    by_number = {version.number: version for version in versions}
    can_read = selectors.can_download_exports(request.user, batch.project)
    diff, error, status = None, "", 200
    chosen = (0, 0)
    if len(versions) >= 2 and can_read:
        after = _version_param(request, "to", versions[0].number)
        before = _version_param(request, "from", (after or 2) - 1)
        missing = [str(n) for n in (before, after) if n not in by_number]
        if before is None or after is None or missing:
            error = (
                f"Batch {batch.name} has versions 1 to {versions[0].number}; "
                f"from and to must name two of them (got {', '.join(missing) or 'text'})."
            )
            status = 400
        else:
            chosen = (before, after)
            diff = batch_diff(by_number[before], by_number[after])
    context = {
        "project": batch.project,
        "batch": batch,
        "versions": versions,
        "diff": diff,
        "error": error,
        "chosen": chosen,
        "can_read": can_read,
        "can_export": selectors.can_manage_data(request.user, batch.project),
        "pending": batch.exports.filter(
            status__in=(ExportJob.Status.QUEUED, ExportJob.Status.RUNNING)
        ).order_by("pk"),
    }
    template = "exports/batch_detail.html"
    if request.htmx:
        template += "#batch-diff"
    return render(request, template, context, status=status)


def _version_param(request: HtmxHttpRequest, name: str, default: int) -> int | None:
    """A version number from the query string (None for one that is not a number)."""
    raw = request.GET.get(name, "")
    if not raw:
        return default
    return int(raw) if raw.isdigit() else None
