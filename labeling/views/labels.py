"""The labeling surface: the trajectory page itself, and its writes and partials: set a
step label, undo, edit tags and rationale, show a step's history, load the next page of
steps, submit the trajectory.

Each write answers HTMX with only what changed: the step row and the progress counter
(out of band). A plain form post (no JavaScript) is redirected back to the step.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from labeling import selectors, services
from labeling.forms import StepLabelForm, VerdictForm
from labeling.selectors import LabelingState
from labeling.views import spans
from labeling.views.common import (
    form_message,
    labeling_surface,
    queue_param,
    refuse,
    surface_context,
    trigger,
)
from stepscope.web import HtmxHttpRequest
from trajectories.models import Step
from trajectories.selectors import STEP_PREVIEW_CHARS, project_get_for_user, step_get_for_user


def _page_url(state: LabelingState, anchor: str = "") -> str:
    url = reverse("trajectory-detail", args=[state.trajectory.pk])
    if state.queue_id:
        url += f"?queue={state.queue_id}"
    return url + (f"#{anchor}" if anchor else "")


def _row_response(request: HtmxHttpRequest, user_state: LabelingState, step: Step) -> HttpResponse:
    """The changed step row, and the progress counter out of band, read after the write."""
    fresh = selectors.labeling_state_for_user(
        request.user, user_state.trajectory.pk, queue_id=user_state.queue_id
    )
    rows, _ = selectors.step_rows(fresh, step_ids=[step.pk])
    context = {
        "project": fresh.project,
        "trajectory": fresh.trajectory,
        "state": fresh,
        "schema": fresh.schema,
        "step": rows[0],
        "preview_chars": STEP_PREVIEW_CHARS,
        "queue_id": fresh.queue_id,
    }
    response = render(request, "labeling/label_response.html", context)
    row = rows[0]
    # In first-error mode an error label ends the steps asked for: the script moves on to
    # the finish panel instead of the next step.
    stop = bool(
        fresh.schema
        and fresh.schema.first_error_mode
        and fresh.first_error_index is not None
        and fresh.first_error_index <= row.index
    )
    return trigger(response, "stepscope:labelled", {"step": row.pk, "stop": stop})


@login_required
@require_http_methods(["GET", "POST"])
def step_label(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """GET: the label editor of a step (tags, rationale, correction). POST: set the label."""
    step = step_get_for_user(request.user, pk)
    state = selectors.labeling_state_for_user(
        request.user, step.trajectory_id, queue_id=queue_param(request)
    )
    if request.method == "GET":
        rows, _ = selectors.step_rows(state, step_ids=[step.pk])
        context = {
            "project": state.project,
            "trajectory": state.trajectory,
            "state": state,
            "schema": state.schema,
            "step": rows[0],
            "focus": request.GET.get("field", "value"),
            "queue_id": state.queue_id,
        }
        if request.htmx:
            return render(request, "labeling/step_editor.html#editor", context)
        return render(request, "labeling/step_editor.html", context)

    form = StepLabelForm(request.POST)
    back = _page_url(state, f"step-{step.pk}")
    if not form.is_valid():
        return refuse(request, services.LabelingError(form_message(form)), back=back)
    try:
        services.step_label_set(state=state, step=step, **form.service_kwargs())
    except services.LabelingError as error:
        return refuse(request, error, back=back)
    if not request.htmx:
        return HttpResponseRedirect(back)
    return _row_response(request, state, step)


@login_required
@require_POST
def label_undo(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Undo this user's latest label change on the trajectory (key ``u``)."""
    state = selectors.labeling_state_for_user(request.user, pk, queue_id=queue_param(request))
    if services.span_undo_is_next(state):
        # The latest change was to a span: undo it and answer with the span panel.
        return spans.span_undo_answer(request, state)
    try:
        step_id = services.step_label_undo(state=state)
    except services.LabelingError as error:
        return refuse(request, error, back=_page_url(state))
    if not request.htmx:
        return HttpResponseRedirect(_page_url(state, f"step-{step_id}"))
    step = Step.objects.only("id", "trajectory_id").get(pk=step_id)
    response = _row_response(request, state, step)
    # The script does not know which row changed: point the swap at it.
    response["HX-Retarget"] = f"#step-{step_id}"
    response["HX-Reswap"] = "outerHTML"
    return trigger(response, "stepscope:undone", {"step": step_id})


@login_required
@require_GET
def step_history(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    step = step_get_for_user(request.user, pk)
    state = selectors.labeling_state_for_user(request.user, step.trajectory_id)
    context = {
        "project": state.project,
        "trajectory": state.trajectory,
        "step": step,
        "entries": selectors.step_label_history(state, step),
        "blind": state.blind,
    }
    if request.htmx:
        return render(request, "labeling/step_history.html#history", context)
    return render(request, "labeling/step_history.html", context)


@login_required
@require_GET
def trajectory_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The trajectory page: steps with labels, the user's schema, progress, lease and
    verdict, in constant queries; 404 outside the user's projects."""
    return render(request, "labeling/trajectory_detail.html", labeling_surface(request, pk))


@login_required
@require_GET
def trajectory_steps(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The next page of step rows, for a long trajectory loaded as the annotator scrolls;
    with ``step`` ("go to step"), the page that holds that step, scrolled to it."""
    state = selectors.labeling_state_for_user(request.user, pk, queue_id=queue_param(request))
    goto = request.GET.get("step", "").strip()
    if goto.isdigit():
        return _step_goto(request, state, int(goto))
    start = request.GET.get("start", "0")
    context = surface_context(state, start=int(start) if start.isdigit() else 0)
    if request.htmx:
        return render(request, "labeling/trajectory_detail.html#steps-page", context)
    return render(request, "labeling/trajectory_detail.html", {**context, "jumped": True})


def _step_goto(request: HtmxHttpRequest, state: LabelingState, index: int) -> HttpResponse:
    """The page of steps that holds step ``index`` (the last step, past the end). HTMX
    gets the page in place of the steps shown, scrolled to the step; a plain GET is
    redirected to that page with the step as its anchor, so the browser scrolls there."""
    trajectory = state.trajectory
    index = min(index, max(trajectory.step_count - 1, 0))
    start = index - index % selectors.STEPS_PAGE_SIZE
    step_pk = (
        Step.objects.filter(trajectory_id=trajectory.pk, index=index)
        .values_list("pk", flat=True)
        .first()
    )
    anchor = f"step-{step_pk}" if step_pk is not None else "steps"
    if not request.htmx:
        query = {"start": start, **({"queue": state.queue_id} if state.queue_id else {})}
        url = reverse("trajectory-steps", args=[trajectory.pk])
        return HttpResponseRedirect(f"{url}?{urlencode(query)}#{anchor}")
    context = {**surface_context(state, start=start), "jumped": True}
    response = render(request, "labeling/trajectory_detail.html#steps-page", context)
    response["HX-Reswap"] = f"innerHTML show:#{anchor}:top"
    if step_pk is None:
        return response
    # The step gone to becomes current, so the label keys act on it.
    return trigger(response, "stepscope:goto", {"step": step_pk})


@login_required
@require_POST
def trajectory_submit(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Finish the trajectory: verdict, finish reason, comment, flag (key ``s``)."""
    state = selectors.labeling_state_for_user(request.user, pk, queue_id=queue_param(request))
    form = VerdictForm(request.POST)
    back = _page_url(state, "finish")
    if not form.is_valid():
        return _refuse_submit(request, services.LabelingError(form_message(form)), back=back)
    was_blind = state.blind or not state.show_model_scores
    try:
        services.trajectory_submit(state=state, **form.cleaned_data)
    except services.LabelingError as error:
        return _refuse_submit(request, error, back=back)
    if not request.htmx:
        return HttpResponseRedirect(back)
    fresh = selectors.labeling_state_for_user(request.user, pk, queue_id=state.queue_id)
    context = {
        "project": fresh.project,
        "trajectory": fresh.trajectory,
        "state": fresh,
        "schema": fresh.schema,
        "queue_id": fresh.queue_id,
        "just_submitted": True,
    }
    response = render(request, "labeling/finish_response.html", context)
    if was_blind:
        # Other annotators' labels (or model scores) were hidden until now: show them.
        response["HX-Refresh"] = "true"
    return trigger(response, "stepscope:submitted", {"trajectory": pk})


def _refuse_submit(
    request: HtmxHttpRequest, error: services.LabelingError, *, back: str
) -> HttpResponse:
    """A refused submit says why beside the Submit button, not in the flash area a screen
    above it."""
    return refuse(
        request, error, back=back, template="labeling/_finish_error.html", target="#finish-error"
    )


@login_required
@require_GET
def guidelines(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = project_get_for_user(request.user, slug)
    return render(request, "labeling/guidelines.html", {"project": project})
