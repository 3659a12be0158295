"""The failure-modes page (``/p/<slug>/failures/modes/``): the latest (or a chosen) run's
modes with sizes, shares, examples and splits; starting a run; each mode's one-click
actions (a queue, a saved selection, a judge run, the export form with the mode's
selection; "open as list" is a link with ``failure_mode=``);
the run rows and Cancel of the job base."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from discovery import mode_selectors, mode_services
from discovery.models import FailureMode
from discovery.note_views import notes_context
from evaluation.compare import compare_options
from evaluation.views.common import compare_project
from exports.models import Selection
from exports.services.selections import selection_save
from labeling.services import LabelingError, queue_create
from scoring.models import Scorer
from scoring.prm import LLM_JUDGE
from scoring.selectors import scorers_for_project
from scoring.services import ScoringError, scoring_run_start
from stepscope.jobs.views import JobRows
from stepscope.queueing import QueueUnavailable
from stepscope.web import HtmxHttpRequest, current_user
from trajectories.models import Project
from trajectories.selection import SelectionError, TrajectoryFilters, selection_parse
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
        "judges": _judges(project),
        "selections": Selection.objects.filter(project=project).order_by("name"),
        "list_url": reverse("trajectory-list", args=[project.slug]),
        **notes_context(request, project),
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


def _mode_to_act_on(request: HtmxHttpRequest, pk: int) -> tuple[FailureMode, Project]:
    """A mode of a project the user may compare in (outsiders 404) and act on (403)."""
    mode = mode_selectors.failure_mode_get_for_user(request.user, pk)
    project = compare_project(request, mode.run.project.slug)
    _manager(request, project)
    return mode, project


def _mode_filters(mode: FailureMode) -> TrajectoryFilters:
    return TrajectoryFilters(failure_mode=mode.pk)


@login_required
@require_POST
def failure_mode_queue(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """One click: a labeling queue over the mode's trajectories."""
    mode, project = _mode_to_act_on(request, pk)
    name = request.POST.get("name", "").strip() or f"failure mode {mode.number} (run {mode.run_id})"
    try:
        queue = queue_create(
            project=project,
            name=name,
            created_by=current_user(request),
            filters=_mode_filters(mode),
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
    mode, project = _mode_to_act_on(request, pk)
    name = request.POST.get("name", "").strip() or _selection_name(mode)
    try:
        selection_save(
            project=project, name=name, filters=_mode_filters(mode), user=current_user(request)
        )
    except ValueError as error:
        messages.error(request, f"name: {error}")
        return HttpResponseRedirect(_page(project))
    messages.success(request, f"Selection {name!r} saved (failure_mode={mode.pk}).")
    return HttpResponseRedirect(_page(project))


@login_required
@require_POST
def failure_mode_judge(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """One click: a judge run over the mode's trajectories (every labelable step of them,
    as the scoring page's run of that judge would read them), with the judge chosen."""
    mode, project = _mode_to_act_on(request, pk)
    unknown = sorted(set(request.POST) - {"judge", "csrfmiddlewaretoken"})
    name = request.POST.get("judge", "").strip()
    judge = next((s for s in _judges(project) if s.name == name), None)
    if unknown:
        messages.error(request, f"Unknown parameters: {', '.join(unknown)}")
    elif judge is None:
        messages.error(
            request,
            f"judge: choose an LLM judge of this project{f' ({name!r} is none)' if name else ''}",
        )
    else:
        try:
            run = scoring_run_start(
                project=project,
                scorer=judge,
                user=current_user(request),
                filters=_mode_filters(mode),
                on_too_long="skip",
            )
        except (ScoringError, SelectionError, QueueUnavailable) as error:
            messages.error(request, f"judge: {error}")
        else:
            messages.success(
                request,
                f"Judge run #{run.pk} of {judge.name} queued over failure mode {mode.number}.",
            )
            return HttpResponseRedirect(reverse("scoring-section", args=[project.slug]))
    return HttpResponseRedirect(_page(project))


@login_required
@require_POST
def failure_mode_export(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """One click: the export form with the mode's selection chosen (saved as
    ``failure-mode-<id>`` the first time; exports name a saved selection in their
    manifest)."""
    mode, project = _mode_to_act_on(request, pk)
    name = _selection_name(mode)
    saved = Selection.objects.filter(project=project, name=name).first()
    if saved is None:
        saved = selection_save(
            project=project, name=name, filters=_mode_filters(mode), user=current_user(request)
        )
    elif selection_parse(saved.definition) != _mode_filters(mode):
        messages.error(
            request,
            f"selection {name!r} exists with other filters; delete it or export through"
            " “Save as selection” with a new name",
        )
        return HttpResponseRedirect(_page(project))
    query = urlencode({"selection": saved.name})
    return HttpResponseRedirect(f"{reverse('export-list', args=[project.slug])}?{query}")


def _selection_name(mode: FailureMode) -> str:
    return f"failure-mode-{mode.pk}"


def _judges(project: Project) -> list[Scorer]:
    return [s for s in scorers_for_project(project) if s.kind == LLM_JUDGE]


_run_rows = JobRows(
    get_for_user=mode_selectors.failure_mode_run_get_for_user,
    can_manage=can_manage_data,
    cancel=lambda run: mode_services.failure_mode_run_cancel(run=run),
    template="discovery/_run_row.html",
    page="failure-modes",
)
failure_mode_run_row = _run_rows.row_view()
failure_mode_run_cancel = _run_rows.cancel_view()
