"""The scoring section of a project: scorers to run, recent runs with live progress,
cancel, training the embedded head, credit attribution runs; and token saliency of one
step, opened on demand from the trajectory page.

The project home loads the section with HTMX (``hx-trigger="load"``) and links to the
full page for browsers without JavaScript. Active run rows poll themselves every two
seconds and stop once the run ends.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from labeling.selectors import LabelingState, labeling_state_for_user
from scoring import methods, prm, selectors, services
from scoring.evidence import PAGE_STEPS
from scoring.forms import AttributionRunForm, ScorerCreateForm, ScoringRunForm, TrainHeadForm
from scoring.model_policy import model_policy
from scoring.models import AttributionRun, Scorer
from stepscope.jobs.views import JobRows
from stepscope.web import HtmxHttpRequest, current_user
from trajectories.models import Project
from trajectories.selectors import can_manage_data, project_get_for_user, step_get_for_user


def _section(
    request: HtmxHttpRequest,
    project: Project,
    *,
    run_form: ScoringRunForm | None = None,
    train_form: TrainHeadForm | None = None,
    attribution_form: AttributionRunForm | None = None,
    scorer_form: ScorerCreateForm | None = None,
    added: Scorer | None = None,
) -> HttpResponse:
    scorers = selectors.scorer_choices(project)
    can_manage = can_manage_data(request.user, project)
    context: dict[str, Any] = {
        "project": project,
        "can_manage": can_manage,
        "runs": selectors.scoring_runs_recent(project),
        "attribution_runs": selectors.attribution_runs_recent(project),
        "scorers": scorers,
        "judges": [s for s in scorers if s.kind == prm.LLM_JUDGE],
        "run_form": run_form or ScoringRunForm(scorers=scorers, project=project),
        "train_form": train_form or TrainHeadForm(),
        "methods": methods.METHODS.values(),
    }
    if can_manage:
        context["attribution_form"] = attribution_form or AttributionRunForm(
            scorers=selectors.scorers_with_scores(project)
        )
        context["scorer_form"] = scorer_form or ScorerCreateForm(
            allow_remote_code=_may_allow_remote_code(request)
        )
        context["added"] = added
        context["model_dirs"] = model_policy().model_dirs
    template = "scoring/project_scoring.html"
    if request.htmx:
        template += "#scoring-section"
    return render(request, template, context)


def _managed_project(request: HtmxHttpRequest, slug: str) -> Project:
    project = project_get_for_user(request.user, slug)
    if not can_manage_data(request.user, project):
        raise PermissionDenied("Scoring needs the researcher or admin role.")
    return project


@login_required
@require_GET
def scoring_section(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    return _section(request, project_get_for_user(request.user, slug))


@login_required
@require_POST
def scoring_run_start(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = _managed_project(request, slug)
    form = ScoringRunForm(request.POST, scorers=selectors.scorer_choices(project), project=project)
    if form.is_valid():
        scorer = form.cleaned_data["scorer"]
        judged = prm.kind_get(scorer.kind).prompts
        try:
            services.scoring_run_start(
                project=project,
                scorer=scorer,
                user=current_user(request),
                only_unscored=form.cleaned_data["only_unscored"],
                queue=form.cleaned_data["queue"],
                on_too_long=(form.cleaned_data["on_too_long"] or "skip") if judged else None,
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
                user=current_user(request),
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


def _may_allow_remote_code(request: HtmxHttpRequest) -> bool:
    # As in the API: only where the operator allows it, and then only for staff.
    return model_policy().allow_remote_code and request.user.is_staff


@login_required
@require_POST
def scorer_create(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """Register a model scorer of the project (a PRM or an LLM judge), through the same
    services and checks as ``POST /api/v1/scorers/``."""
    project = _managed_project(request, slug)
    form = ScorerCreateForm(request.POST, allow_remote_code=_may_allow_remote_code(request))
    scorer = None
    if form.is_valid():
        data = form.cleaned_data
        try:
            scorer = services.scorer_create(
                project=project,
                name=data["name"],
                kind=data["kind"],
                model_ref=data["model_ref"],
                parameters=form.parameters(),
                queue=data["queue"],
                trust_remote_code=data.get("trust_remote_code", False),
                user=current_user(request),
                # A kind with prompt versions starts with its mode's default prompt.
                prompt={} if prm.kind_get(data["kind"]).prompts else None,
            )
        except services.ScoringError as error:
            form.add_error(error.field if error.field in form.fields else None, str(error))
    if form.errors:
        return _section(request, project, scorer_form=form)
    # The section itself, with the new scorer in the run form and a line saying so.
    return _section(request, project, added=scorer)


# Each run's row polls itself while the run is active; Cancel swaps in the ended row.
_scoring_rows = JobRows(
    get_for_user=selectors.scoring_run_get_for_user,
    can_manage=can_manage_data,
    cancel=lambda run: services.scoring_run_cancel(run=run),
    template="scoring/_run_row.html",
    page="scoring-section",
)
scoring_run_row = _scoring_rows.row_view()
scoring_run_cancel = _scoring_rows.cancel_view()


# --- Attribution runs ----------------------------------------------------------------------


@login_required
@require_POST
def attribution_run_start(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = _managed_project(request, slug)
    form = AttributionRunForm(request.POST, scorers=selectors.scorers_with_scores(project))
    if form.is_valid():
        try:
            services.attribution_run_start(
                project=project,
                method=form.cleaned_data["method"],
                scorer=form.cleaned_data["scorer"],
                label_source=form.cleaned_data["labels"],
                parameters=form.parameters(),
                user=current_user(request),
            )
        except services.ScoringError as error:
            form.add_error(None, str(error))
    if form.errors:
        return _section(request, project, attribution_form=form)
    if request.htmx:
        return _section(request, project)
    return redirect(reverse("scoring-section", args=[project.slug]))


_attribution_rows = JobRows(
    get_for_user=selectors.attribution_run_get_for_user,
    can_manage=can_manage_data,
    cancel=lambda run: services.attribution_run_cancel(run=run),
    template="scoring/_attribution_run_row.html",
    page="scoring-section",
)
attribution_run_row = _attribution_rows.row_view()
attribution_run_cancel = _attribution_rows.cancel_view()


# --- The trajectory page's scores and credit ----------------------------------------------


def _requested(request: HtmxHttpRequest, name: str) -> int | None:
    """An id the user picked: ``?<name>=ID`` on this request, or for an HTMX request made
    from the trajectory page (the evidence strip, a saved label's row, saliency), on the
    page's address."""
    wanted = request.GET.get(name, "")
    if not wanted and request.htmx:
        current = request.htmx.current_url or ""
        wanted = (parse_qs(urlsplit(current).query).get(name) or [""])[0]
    return int(wanted) if wanted.isdigit() else None


def _shown(request: HtmxHttpRequest, state: LabelingState) -> tuple[Scorer | None, int | None]:
    """The scorer and the credit run the page shows (see evidence_choice_resolve)."""
    return selectors.evidence_choice_resolve(
        state.user_id,
        state.project,
        scorer_id=_requested(request, "scorer"),
        run_id=_requested(request, "credit"),
    )


def _index(value: str) -> int | None:
    return int(value) if value.isdigit() else None


@login_required
@require_GET
def trajectory_evidence(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """PRM scores of the picked scorer (``?scorer=ID``, else the user's last pick in the
    project, else the scorer that last finished), Monte Carlo values, the credits of the
    picked run (``?credit=ID``, else the last pick, else the newest) and first-error flags
    of one trajectory, in one query that reads the rows of the part asked for, not the
    whole trajectory. The trajectory page loads it after it is shown: ``part=top`` the
    strips (at most ``STRIP_CELLS`` cells), ``part=columns`` the credit column of the steps
    with index in ``[from, to)`` (at most ``PAGE_STEPS`` of them; swapped out of band into
    their rows), ``part=step`` one step's column. Without HTMX: a page of its own, the
    strips and a table of ``PAGE_STEPS`` steps from ``?from=`` (0), with links to the
    pages before and after. Model scores and credits follow the project setting that
    hides them from annotators until they submit."""
    state = labeling_state_for_user(request.user, pk, queue_id=_index(request.GET.get("queue", "")))
    part = request.GET.get("part", "") if request.htmx else ""
    low = _index(request.GET.get("from", "")) or 0
    high = _index(request.GET.get("to", ""))
    if part != "columns" or high is None or high - low > PAGE_STEPS:
        high = low + PAGE_STEPS
    if part == "top":
        low = high = 0  # no step's column: the strips and the flags only
    step_id = _index(request.GET.get("step", "")) if part == "step" else None
    if part == "step" and step_id is None:
        raise Http404("No such step in this trajectory.")
    evidence = selectors.trajectory_evidence(
        state.trajectory,
        user_id=state.user_id,
        show_scores=state.show_model_scores,
        blind=state.blind,
        run_id=_requested(request, "credit"),
        scorer_id=_requested(request, "scorer"),
        low=0 if step_id is not None else low,
        high=None if step_id is not None else high,
        step_id=step_id,
        top=part not in ("columns", "step"),
    )
    context: dict[str, Any] = {
        "project": state.project,
        "trajectory": state.trajectory,
        "evidence": evidence,
        "queue_id": state.queue_id,
    }
    template = "scoring/trajectory_evidence.html"
    if part == "top":
        return render(request, f"{template}#top", context)
    if part == "columns":
        context["column_steps"] = evidence.steps
        return render(request, f"{template}#columns", context)
    if part == "step":
        context["ev"] = evidence.by_step.get(step_id) if step_id is not None else None
        if context["ev"] is None:
            raise Http404("No such step in this trajectory.")
        return render(request, f"{template}#column", context)
    count = state.trajectory.step_count
    context["table"] = {
        "low": low,
        "high": min(high, count),
        "previous": max(low - PAGE_STEPS, 0) if low > 0 else None,
        "next": high if high < count else None,
        "paged": count > PAGE_STEPS or low > 0,
    }
    return render(request, template, context)


# --- Token saliency of one step ------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
def step_saliency(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """GET: the newest saliency map of the step with the scorer the page shows (the
    picked one, else the default; or a
    button to compute it). POST: compute it on the scorer's queue; the answer polls until
    the map is ready. Hidden like every model score from annotators of a project that
    hides them, until they submit."""
    step = step_get_for_user(request.user, pk)
    state = labeling_state_for_user(request.user, step.trajectory_id)
    if not state.show_model_scores:
        raise PermissionDenied("Model scores are hidden until you submit this trajectory.")
    project = state.project
    scorer = _shown(request, state)[0] or selectors.default_scorer(project)
    can_manage = can_manage_data(request.user, project)
    run = selectors.saliency_latest(step, scorer) if scorer else None
    error = ""
    if request.method == "POST":
        if not can_manage:
            raise PermissionDenied("Computing saliency needs the researcher or admin role.")
        if scorer is None:
            error = "No scorer has scored this project yet."
        else:
            try:
                run = services.attribution_run_start(
                    project=project,
                    method=AttributionRun.Method.TOKEN_SALIENCY,
                    scorer=scorer,
                    step=step,
                    user=current_user(request),
                )
            except services.ScoringError as failure:
                error = str(failure)
    context = {
        "project": project,
        "step": step,
        "scorer": scorer,
        "run": run,
        "error": error,
        "can_manage": can_manage,
    }
    if request.htmx:
        return render(request, "scoring/step_saliency.html#saliency", context)
    return render(request, "scoring/step_saliency.html", context)


@login_required
@require_POST
def trajectory_evidence_choose(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Remember which scorer's scores and which run's credits the user sees on the
    project's trajectory pages, then show this one with them (``?scorer=&credit=``, so
    the address says what the page shows). Any member may pick what they may see."""
    state = labeling_state_for_user(
        request.user, pk, queue_id=_index(request.POST.get("queue", ""))
    )
    scorer_id = _index(request.POST.get("scorer", ""))
    run_id = _index(request.POST.get("credit", ""))
    try:
        services.evidence_choice_save(
            user=current_user(request),
            project=state.project,
            scorer_id=scorer_id,
            run_id=run_id,
        )
    except ValueError as error:
        messages.error(request, str(error))
        scorer_id = run_id = None
    query = {
        name: value
        for name, value in (("scorer", scorer_id), ("credit", run_id), ("queue", state.queue_id))
        if value is not None
    }
    url = reverse("trajectory-detail", args=[pk])
    return redirect(f"{url}?{urlencode(query)}" if query else url)
