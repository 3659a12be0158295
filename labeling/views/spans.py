"""The span panel of the trajectory page: the user's and (unless blind) the other
annotators' spans, agreement by overlap, history, and the form that labels a run of
steps (shift+j / shift+k select it, a value's key labels it: labeling.js). The page
loads it after it is shown; without JavaScript it is a page of its own."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from labeling import selectors, services
from labeling.selectors import LabelingState
from labeling.spans import MAX_SPAN_VALUE_CHARS, SpanLabel
from labeling.views.common import form_message, queue_param, refuse
from stepscope.web import HtmxHttpRequest
from trajectories.selectors import projects_for_user


class SpanForm(forms.Form):
    schema = forms.IntegerField(min_value=1)
    start = forms.IntegerField(min_value=0)
    end = forms.IntegerField(min_value=0)
    value = forms.CharField(max_length=MAX_SPAN_VALUE_CHARS)


def _context(state: LabelingState, **extra: object) -> dict[str, Any]:
    schemas = selectors.span_schemas_active(state.project.pk)
    if state.lease is not None and state.lease.span_schemas:
        # A queue that asks for some span schemas offers only those.
        schemas = [s for s in schemas if s.name in state.lease.span_schemas]
    spans = list(selectors.spans_visible(state))
    colors = {(s.pk, e["value"]): e["color"] for s in schemas for e in s.entries}
    rows = [
        {
            "id": span.pk,
            "start": span.start_index,
            "end": span.end_index,
            "value": span.value,
            "schema": span.schema.name,
            "annotator": span.annotator.get_username(),
            "mine": span.annotator_id == state.user_id,
            "color": colors.get((span.schema_id, span.value), "#6b7280"),
        }
        for span in spans
    ]
    agreement = selectors.span_agreement_by_schema(spans)
    return {
        "project": state.project,
        "trajectory": state.trajectory,
        "state": state,
        "queue_id": state.queue_id,
        "span_schemas": schemas,
        "spans": rows,
        "agreement": {name: a for name, a in agreement.items() if a.pairs},
        "history": selectors.span_history(state),
        "last_step": max(state.trajectory.step_count - 1, 0),
        # What the page's script needs (as JSON in an attribute, which htmx swaps in as
        # it is): the schemas' keys and the spans to bracket.
        "spans_json": json.dumps(
            {
                "schemas": [{"id": s.pk, "name": s.name, "values": s.entries} for s in schemas],
                "spans": rows,
            }
        ),
        **extra,
    }


def _back(state: LabelingState) -> str:
    url = reverse("trajectory-spans", args=[state.trajectory.pk])
    return url + (f"?queue={state.queue_id}" if state.queue_id else "")


def _answer(request: HtmxHttpRequest, state: LabelingState, **extra: object) -> HttpResponse:
    if not request.htmx:
        return HttpResponseRedirect(_back(state))
    state = selectors.labeling_state_for_user(
        request.user, state.trajectory.pk, queue_id=state.queue_id
    )
    return render(request, "labeling/_spans.html", _context(state, **extra))


@login_required
@require_http_methods(["GET", "POST"])
def trajectory_spans(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """GET: the panel (HTMX) or its page. POST: give a run of steps the user's value
    under a span schema."""
    state = selectors.labeling_state_for_user(request.user, pk, queue_id=queue_param(request))
    if request.method == "POST":
        form = SpanForm(request.POST)
        if not form.is_valid():
            return refuse(request, services.LabelingError(form_message(form)), back=_back(state))
        try:
            span, _ = services.span_label_set(
                state=state,
                schema=form.cleaned_data["schema"],
                start=form.cleaned_data["start"],
                end=form.cleaned_data["end"],
                value=form.cleaned_data["value"],
            )
        except services.LabelingError as error:
            return refuse(request, error, back=_back(state))
        return _answer(request, state, saved=span)
    context = _context(state)
    if request.htmx:
        if not context["span_schemas"] and not context["spans"]:
            # No span schema: no panel (the page keeps its space for the steps).
            return HttpResponse('<section class="spans" id="spans" hidden></section>')
        return render(request, "labeling/_spans.html", context)
    return render(request, "labeling/spans.html", context)


@login_required
@require_POST
def span_delete(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Remove one of the user's spans (it stays in the history)."""
    trajectory_id = (
        SpanLabel.objects.filter(pk=pk, trajectory__project__in=projects_for_user(request.user))
        .values_list("trajectory_id", flat=True)
        .first()
    )
    if trajectory_id is None:
        raise Http404("No such span.")
    state = selectors.labeling_state_for_user(
        request.user, trajectory_id, queue_id=queue_param(request)
    )
    try:
        services.span_label_delete(state=state, span_id=pk)
    except services.LabelingError as error:
        return refuse(request, error, back=_back(state))
    return _answer(request, state, removed=True)


def span_undo_answer(request: HtmxHttpRequest, state: LabelingState) -> HttpResponse:
    """Undo the user's latest span change (key ``u`` when it is newer than their latest
    step label change: ``labels.label_undo`` decides) and answer with the span panel,
    swapped in where the page's script aimed at a step row."""
    try:
        start, end = services.span_label_undo(state=state)
    except services.LabelingError as error:
        return refuse(request, error, back=_back(state))
    if not request.htmx:
        url = reverse("trajectory-detail", args=[state.trajectory.pk])
        return HttpResponseRedirect(url + (f"?queue={state.queue_id}" if state.queue_id else ""))
    response = _answer(request, state, undone=(start, end))
    response["HX-Retarget"] = "#spans"
    response["HX-Reswap"] = "outerHTML"
    return response
