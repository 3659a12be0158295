"""The failure-modes page (``/p/<slug>/failures/modes/``): the latest (or a chosen) run's
modes with sizes, shares, examples and splits; starting a run; each mode's one-click
actions (a queue, a saved selection; "open as list" is a link with ``failure_mode=``);
the run rows and Cancel of the job base."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from discovery import mode_selectors, mode_services
from evaluation.compare import compare_options
from evaluation.views.common import compare_project
from exports.models import Selection
from exports.services.selections import selection_save
from labeling.services import LabelingError, queue_create
from scoring.prm import LLM_JUDGE
from scoring.selectors import scorers_for_project
from stepscope.jobs.views import JobRows
from stepscope.queueing import QueueUnavailable
from stepscope.web import HtmxHttpRequest, current_user
from trajectories.models import Project
from trajectories.selection import TrajectoryFilters, selection_parse
from trajectories.selectors import can_manage_data


def _page(project: Project) -> str:
    return reverse("failure-modes", args=[project.slug])


@login_required
@require_GET
def failure_modes_page(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = compare_project(request, slug)
    unknown = sorted(set(request.GET) - {"run"})
    if unknown:
        return HttpResponse(f"Unknown parameters: {', '.join(unknown)}", status=400)
    runs = mode_selectors.failure_mode_runs(project)
    chosen = request.GET.get("run", "")
    if chosen:
        if not chosen.isdigit():
            return HttpResponse("run: give a run's id (a number)", status=400)
        run = runs.filter(pk=int(chosen)).first()
        if run is None:
            return HttpResponse(f"run: no failure-mode run {chosen} in this project", status=404)
    else:
        run = mode_selectors.failure_mode_run_latest(project)
    context: dict[str, Any] = {
        "project": project,
        "can_manage": can_manage_data(request.user, project),
        "runs": list(runs[: mode_selectors.RUNS_SHOWN]),
        "run": run,
        "modes": mode_selectors.failure_modes_shown(run) if run is not None else [],
        "sources": compare_options(project).sources,
        "default_labels": compare_options(project).default_labels,
        "judges": [s for s in scorers_for_project(project) if s.kind == LLM_JUDGE],
        "selections": Selection.objects.filter(project=project).order_by("name"),
        "list_url": reverse("trajectory-list", args=[project.slug]),
    }
    return render(request, "discovery/failure_modes.html", context)


def _manager(request: HtmxHttpRequest, project: Project) -> None:
    if not can_manage_data(request.user, project):
        raise PermissionDenied("Only researchers and admins run failure modes and act on them.")


@login_required
@require_POST
def failure_modes_start(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = compare_project(request, slug)
    _manager(request, project)
    threshold = request.POST.get("threshold", "").strip()
    filters = TrajectoryFilters()
    name = request.POST.get("selection", "").strip()
    try:
        if name:
            saved = Selection.objects.filter(project=project, name=name).first()
            if saved is None:
                raise mode_services.FailureModeError({"selection": f"no selection {name!r}"})
            filters = selection_parse(saved.definition)
        run = mode_services.failure_mode_run_start(
            project=project,
            user=current_user(request),
            labels=request.POST.get("labels", "").strip(),
            threshold=float(threshold) if threshold else None,
            filters=filters,
            judge=request.POST.get("judge", "").strip(),
        )
    except ValueError as error:
        errors = getattr(error, "errors", None) or {"threshold": "give a number from 0 to 1"}
        messages.error(request, "; ".join(f"{k}: {v}" for k, v in errors.items()))
        return HttpResponseRedirect(_page(project))
    except QueueUnavailable as error:
        messages.error(request, str(error))
        return HttpResponseRedirect(_page(project))
    messages.success(request, f"Failure-mode run #{run.pk} queued.")
    return HttpResponseRedirect(_page(project))


@login_required
@require_POST
def failure_mode_queue(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """One click: a labeling queue over the mode's trajectories."""
    mode = mode_selectors.failure_mode_get_for_user(request.user, pk)
    project = mode.run.project
    compare_project(request, project.slug)
    _manager(request, project)
    name = request.POST.get("name", "").strip() or f"failure mode {mode.number} (run {mode.run_id})"
    try:
        queue = queue_create(
            project=project,
            name=name,
            created_by=current_user(request),
            filters=TrajectoryFilters(failure_mode=mode.pk),
            description=f"Failure mode {mode.number}: {mode.name}",
        )
    except LabelingError as error:
        messages.error(request, error.message)
        return HttpResponseRedirect(_page(project))
    messages.success(request, f"Queue {queue.name!r} holds {queue.items.count()} trajectories.")
    return HttpResponseRedirect(reverse("queue-detail", args=[queue.pk]))


@login_required
@require_POST
def failure_mode_selection(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """One click: a saved selection ``failure_mode=<id>``, for exports, judge runs, rules."""
    mode = mode_selectors.failure_mode_get_for_user(request.user, pk)
    project = mode.run.project
    compare_project(request, project.slug)
    _manager(request, project)
    name = request.POST.get("name", "").strip() or f"failure-mode-{mode.pk}"
    try:
        selection_save(
            project=project,
            name=name,
            filters=TrajectoryFilters(failure_mode=mode.pk),
            user=current_user(request),
        )
    except ValueError as error:
        messages.error(request, f"name: {error}")
        return HttpResponseRedirect(_page(project))
    messages.success(request, f"Selection {name!r} saved (failure_mode={mode.pk}).")
    return HttpResponseRedirect(_page(project))


_run_rows = JobRows(
    get_for_user=mode_selectors.failure_mode_run_get_for_user,
    can_manage=can_manage_data,
    cancel=lambda run: mode_services.failure_mode_run_cancel(run=run),
    template="discovery/_run_row.html",
    page="failure-modes",
)
failure_mode_run_row = _run_rows.row_view()
failure_mode_run_cancel = _run_rows.cancel_view()
