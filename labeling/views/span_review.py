"""Adjudication of span labels: researchers and admins see the annotators' spans of a
trajectory side by side, per span schema (their spans, and a grid of the steps with
what covers each), and set the final spans, picking an annotator's or setting a range
and value of their own. Final spans are the ``human:adjudicated`` spans of the export."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from labeling import selectors, services
from labeling.spans import MAX_SPAN_VALUE_CHARS
from labeling.views.common import form_message, refuse
from labeling.views.review import _require_reviewer
from stepscope.web import HtmxHttpRequest, current_user
from trajectories.models import Trajectory
from trajectories.selectors import membership_role, trajectory_get_for_user

_FIELDS = {"csrfmiddlewaretoken", "pick", "remove", "schema", "start", "end", "value"}


class FinalSpanForm(forms.Form):
    """A final span of the reviewer's own (``pick`` and ``remove`` are read apart)."""

    schema = forms.IntegerField(min_value=1)
    start = forms.IntegerField(min_value=0)
    end = forms.IntegerField(min_value=0)
    value = forms.CharField(max_length=MAX_SPAN_VALUE_CHARS)


def _context(trajectory: Trajectory, **extra: object) -> dict[str, Any]:
    return {
        "project": trajectory.project,
        "trajectory": trajectory,
        "reviews": selectors.span_review(
            trajectory.pk, trajectory.step_count, trajectory.project_id
        ),
        "last_step": max(trajectory.step_count - 1, 0),
        **extra,
    }


def _write(request: HtmxHttpRequest, trajectory: Trajectory) -> str:
    """Apply the posted pick, removal or final span; what to say. LabelingError names
    the field that is wrong."""
    adjudicator = current_user(request)
    remove, pick = request.POST.get("remove", ""), request.POST.get("pick", "")
    if remove:
        if not remove.isdigit():
            raise services.LabelingError(f"remove: {remove!r} is no final span id.", field="remove")
        services.final_span_delete(
            trajectory=trajectory, final_id=int(remove), adjudicator=adjudicator
        )
        return "Removed the final span."
    if pick:
        if not pick.isdigit():
            raise services.LabelingError(
                f"pick: no span {pick!r} on this trajectory.", field="pick", status=404
            )
        final, _ = services.final_span_pick(
            trajectory=trajectory, span_id=int(pick), adjudicator=adjudicator
        )
    else:
        form = FinalSpanForm(request.POST)
        if not form.is_valid():
            raise services.LabelingError(form_message(form))
        data = form.cleaned_data
        final, _ = services.final_span_set(
            trajectory=trajectory,
            schema=services.span_schema_of(trajectory.project_id, data["schema"]),
            adjudicator=adjudicator,
            start=data["start"],
            end=data["end"],
            value=data["value"],
        )
    return (
        f"Final: steps {final.start_index}-{final.end_index} · {final.value} ({final.schema.name})."
    )


@login_required
@require_http_methods(["GET", "POST"])
def review_spans(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """GET: the span review page. POST: ``pick`` an annotator's span as final,
    ``remove`` a final span, or set one (``schema``, ``start``, ``end``, ``value``)."""
    trajectory = trajectory_get_for_user(request.user, pk)
    _require_reviewer(membership_role(request.user, trajectory.project))
    back = reverse("review-spans", args=[trajectory.pk])
    if request.method == "POST":
        unknown = sorted(set(request.POST) - _FIELDS)
        if unknown:
            return HttpResponseBadRequest(
                f"Unknown field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}"
                f" (fields: {', '.join(sorted(_FIELDS - {'csrfmiddlewaretoken'}))})."
            )
        try:
            said = _write(request, trajectory)
        except services.LabelingError as error:
            return refuse(request, error, back=back)
        if not request.htmx:
            return HttpResponseRedirect(back)
        return render(
            request, "labeling/review_spans.html#span-review", _context(trajectory, said=said)
        )
    return render(request, "labeling/review_spans.html", _context(trajectory))
