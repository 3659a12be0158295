"""The scoring section of a project: scorers to run, recent runs with live progress,
cancel, and training the embedded head.

The project home loads the section with HTMX (``hx-trigger="load"``) and links to the
full page for browsers without JavaScript. Active run rows poll themselves every two
seconds and stop once the run ends.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.middleware import HtmxDetails

from scoring import selectors, services
from scoring.forms import ScoringRunForm, TrainHeadForm
from scoring.models import ScoringRun
from trajectories.models import Project
from trajectories.selectors import project_get_for_user


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def _section(
    request: HtmxHttpRequest,
    project: Project,
    *,
    run_form: ScoringRunForm | None = None,
    train_form: TrainHeadForm | None = None,
) -> HttpResponse:
    scorers = selectors.scorer_choices(project)
    context: dict[str, Any] = {
        "project": project,
        "can_manage": selectors.can_manage_scoring(request.user, project),
        "runs": selectors.scoring_runs_recent(project),
        "scorers": scorers,
        "run_form": run_form or ScoringRunForm(scorers=scorers),
        "train_form": train_form or TrainHeadForm(),
    }
    template = "scoring/project_scoring.html"
    if request.htmx:
        template += "#scoring-section"
    return render(request, template, context)


def _managed_project(request: HtmxHttpRequest, slug: str) -> Project:
    project = project_get_for_user(request.user, slug)
    if not selectors.can_manage_scoring(request.user, project):
        raise PermissionDenied("Scoring needs the researcher or admin role.")
    return project


@login_required
def scoring_section(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    return _section(request, project_get_for_user(request.user, slug))


@login_required
@require_POST
def scoring_run_start(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = _managed_project(request, slug)
    form = ScoringRunForm(request.POST, scorers=selectors.scorer_choices(project))
    if form.is_valid():
        try:
            services.scoring_run_start(
                project=project,
                scorer=form.cleaned_data["scorer"],
                user=request.user,  # type: ignore[arg-type]
                only_unscored=form.cleaned_data["only_unscored"],
            )
        except services.ScoringError as error:
            form.add_error("scorer", str(error))
    if form.errors:
        # 200, not 422: htmx does not swap error responses in by default.
        return _section(request, project, run_form=form)
    if request.htmx:
        return _section(request, project)
    return redirect(reverse("scoring-section", args=[project.slug]))


@login_required
@require_POST
def scorer_train(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = _managed_project(request, slug)
    form = TrainHeadForm(request.POST)
    if form.is_valid():
        try:
            services.scorer_train_start(
                project=project,
                name=form.cleaned_data["name"],
                user=request.user,  # type: ignore[arg-type]
                neutral=form.cleaned_data["neutral"],
                score_after=form.cleaned_data["score_after"],
            )
        except services.ScoringError as error:
            form.add_error("name", str(error))
    if form.errors:
        return _section(request, project, train_form=form)
    if request.htmx:
        return _section(request, project)
    return redirect(reverse("scoring-section", args=[project.slug]))


def _row(request: HtmxHttpRequest, run: ScoringRun) -> HttpResponse:
    context = {"run": run, "can_manage": selectors.can_manage_scoring(request.user, run.project)}
    return render(request, "scoring/_run_row.html", context)


@login_required
def scoring_run_row(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    run = selectors.scoring_run_get_for_user(request.user, pk)
    if not request.htmx:
        return redirect(reverse("scoring-section", args=[run.project.slug]))
    return _row(request, run)


@login_required
@require_POST
def scoring_run_cancel(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    run = selectors.scoring_run_get_for_user(request.user, pk)
    if not selectors.can_manage_scoring(request.user, run.project):
        raise PermissionDenied("Cancelling needs the researcher or admin role.")
    run = services.scoring_run_cancel(run=run)
    if not request.htmx:
        return redirect(reverse("scoring-section", args=[run.project.slug]))
    return _row(request, run)
