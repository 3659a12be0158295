"""The compare page: model against human step labels (confusion matrix, metrics and
plots), the steps behind each of its numbers, agreement among the humans, decisive-failure
labels, and the disagreement list with the review queue made from it.

Every number and plot point links to the steps behind it; those lists open each step in
the trajectory page. Outsiders get a 404 (the project lookup), annotators a 403 where the
project hides labels or scores from them (:func:`labeling.selectors.can_compare`).
"""

from __future__ import annotations

import math
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from evaluation import compare, decisive, disagreements
from evaluation import compare_metrics as cm
from evaluation import compare_steps as behind
from evaluation.charts import Chart, Datum, line_chart
from evaluation.forms import (
    CompareForm,
    DecisiveCompareForm,
    DisagreementForm,
    FirstErrorFilterForm,
    StepFilterForm,
)
from evaluation.kept import summary_kept, summary_params
from evaluation.span_agreement import span_slice_applies
from evaluation.views.common import (
    base_context,
    compare_project,
    form_errors,
    page_links,
    query_url,
)
from labeling import selectors
from labeling.decisive_sources import decisive_source_choices
from labeling.services import LabelingError
from stepscope.web import HtmxHttpRequest, current_user
from trajectories.models import Project
from trajectories.selectors import (
    membership_role,
)

# --- The compare page ---------------------------------------------------------------------


@login_required
@require_GET
def compare_page(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = compare_project(request, slug)
    options = compare.compare_options(project)
    form = CompareForm(request.GET, project=project, options=options)
    context = {**base_context(request, project), "form": form, "options": options}
    if options.scorers and form.is_valid():
        kept = summary_kept(project, "compare", summary_params("compare", request.GET))
        context["kept"] = kept
        if kept.value is not None:
            context.update(_result_context(project, form.query, kept.value))
    return render(request, "evaluation/compare.html", context)


def _result_context(
    project: Project, query: compare.CompareQuery, result: compare.CompareResult
) -> dict[str, Any]:
    params = query.params()
    scale = result.scale
    metrics = result.metrics

    def steps(**filters: Any) -> str:
        return query_url("compare-steps", project, {**params, **filters})

    def first_errors(**filters: Any) -> str:
        return query_url("compare-first-errors", project, {**params, **filters})

    predicted_values = {scale.bad: "bad", scale.good: "good"}
    rows = []
    for i, value in enumerate(scale.values):
        cells = []
        for j, column in enumerate(scale.values):
            count = int(metrics.confusion[i, j])
            predicted = predicted_values.get(column)
            cells.append(
                {
                    "count": count,
                    "column": scale.names[j],
                    "diagonal": i == j,
                    "href": steps(label=value, predicted=predicted) if predicted and count else "",
                }
            )
        rows.append(
            {
                "value": value,
                "name": scale.names[i],
                "cells": cells,
                "total": int(metrics.confusion[i].sum()),
                "href": steps(label=value),
            }
        )
    slices = [
        {
            "row": row,
            "href": query_url(
                "compare",
                project,
                {**params, "slice": f"{result.by}={row.value}", "by": ""},
            ),
        }
        for row in result.slices
    ]
    return {
        "result": result,
        "query": query,
        "scale": scale,
        "metrics": metrics,
        "confusion_rows": rows,
        "columns": list(scale.names),
        "slices": slices,
        "charts": _charts(query, result, steps, first_errors),
        "links": {
            "bad_steps": steps(label=scale.bad),
            "missed": steps(label=scale.bad, predicted="good"),
            "false_alarms": steps(predicted="bad", label=scale.good),
            "first_errors_wrong": first_errors(outcome="wrong"),
            "erroneous": first_errors(subset="erroneous"),
            "correct": first_errors(subset="correct"),
            "disagreements": query_url("compare-disagreements", project, params),
            "failures": query_url(
                "failure-overview",
                project,
                {"labels": params["labels"], "slice": params.get("slice")},
            ),
            "humans": query_url("compare-humans", project, {"slice": params.get("slice")}),
            "best_threshold": (
                query_url(
                    "compare", project, {**params, "threshold": f"{metrics.sweep.best.threshold:g}"}
                )
                if metrics.sweep and metrics.sweep.best and metrics.sweep.best.threshold is not None
                else ""
            ),
        },
    }


def _percent(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:.0%}"


def _charts(
    query: compare.CompareQuery,
    result: compare.CompareResult,
    steps: Any,
    first_errors: Any,
) -> dict[str, Chart]:
    charts: dict[str, Chart] = {}
    reliability = result.metrics.reliability
    if reliability is not None:
        points = [
            Datum(
                float(reliability.mean_predicted[i]),
                float(reliability.observed[i]),
                f"scores {reliability.edges[i]:.1f}-{reliability.edges[i + 1]:.1f}:"
                f" {int(reliability.counts[i])} steps, {_percent(reliability.observed[i])}"
                " labelled good",
                # The bins' edges exactly as numpy drew them (0.30000000000000004), so
                # the list holds the very steps the point stands for.
                steps(
                    decided=1,
                    score_low=repr(float(reliability.edges[i])),
                    score_high=repr(float(reliability.edges[i + 1])),
                ),
            )
            for i in range(reliability.counts.size)
            if reliability.counts[i]
        ]
        charts["calibration"] = line_chart(
            "Calibration",
            [("share labelled good", "series-1", points)],
            x_range=(0.0, 1.0),
            y_range=(0.0, 1.0),
            x_label="mean score in the bin",
            y_label="share labelled good",
            diagonal=True,
        )
    sweep = result.metrics.sweep
    if sweep is not None and sweep.thresholds.size:
        series = []
        for name, css, values, subset in (
            ("F1", "series-1", sweep.f1, "all"),
            ("accuracy, with an error", "series-2", sweep.acc_erroneous, "erroneous"),
            ("accuracy, without an error", "series-3", sweep.acc_correct, "correct"),
        ):
            points = [
                Datum(
                    float(t),
                    float(v),
                    f"threshold {t:g}: {name} {_percent(v)}",
                    first_errors(threshold=f"{t:g}", subset=subset, outcome="wrong"),
                )
                for t, v in zip(sweep.thresholds, values, strict=True)
            ]
            series.append((name, css, points))
        charts["sweep"] = line_chart(
            "First-error F1 by threshold",
            series,
            x_range=(0.0, 1.0),
            y_range=(0.0, 1.0),
            x_label="threshold",
            y_label="",
            marker=query.threshold,
        )
    outcome = result.outcome
    if outcome is not None:
        for key, title, curve, filter_name, x_label in (
            (
                "by_length",
                "Mean step score by trajectory length",
                outcome.by_length,
                "length",
                "trajectory length (steps)",
            ),
            (
                "by_position",
                "Mean step score by step position",
                outcome.by_position,
                "position",
                "step position",
            ),
        ):
            if curve:
                charts[key] = _curve_chart(title, curve, filter_name, x_label, steps)
    return charts


def _curve_chart(
    title: str, points: list[cm.CurvePoint], filter_name: str, x_label: str, steps: Any
) -> Chart:
    series = []
    for name, css, attribute, outcome in (
        ("all", "series-1", "mean", None),
        ("successes", "series-2", "mean_success", 1),
        ("failures", "series-3", "mean_failure", 0),
    ):
        data = [
            Datum(
                float(p.bucket),
                float(getattr(p, attribute)),
                f"{p.name}: mean score {getattr(p, attribute):.2f} ({name};"
                f" {p.steps} steps in all)",
                steps(**{filter_name: p.bucket, "outcome": outcome}),
            )
            for p in points
        ]
        series.append((name, css, data))
    low, high = points[0].bucket, points[-1].bucket
    return line_chart(
        title,
        series,
        x_range=(low - 0.5, high + 0.5),
        y_range=(0.0, 1.0),
        x_label=x_label,
        y_label="mean step score",
        x_ticks=[(float(p.bucket), p.name) for p in points],
    )


# --- The steps behind a number ------------------------------------------------------------


@login_required
@require_GET
def compare_steps(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project, form, which, context = _behind_forms(request, slug, StepFilterForm)
    if "errors" in context:
        return render(request, "evaluation/compare_steps.html", context, status=400)
    assert isinstance(which, StepFilterForm)
    query = form.query
    scale = compare.scale_for(project, schema=query.schema)
    step_filter = which.step_filter()
    rows, more = behind.compare_steps_page(query, scale, step_filter, page=form.page_number)
    context.update(
        query=query,
        scale=scale,
        rows=rows,
        title=_describe(step_filter, scale, query),
        back=query_url("compare", project, query.params()),
        pages=page_links(request, form.page_number, more),
    )
    return render(request, "evaluation/compare_steps.html", context)


def _behind_forms(
    request: HtmxHttpRequest, slug: str, filter_form: type[forms.Form]
) -> tuple[Project, CompareForm, forms.Form, dict[str, Any]]:
    """The project, the compare form, the form saying which steps (or first errors) are
    behind a number, and the page's context; invalid input puts ``errors`` in it."""
    project = compare_project(request, slug)
    form = CompareForm(request.GET, project=project, options=compare.compare_options(project))
    which = filter_form(request.GET)
    context = {**base_context(request, project), "form": form}
    if not (form.is_valid() and which.is_valid()):
        context["errors"] = form_errors(form, which)
    return project, form, which, context


def _describe(which: behind.StepFilter, scale: cm.Scale, query: compare.CompareQuery) -> str:
    parts = []
    if which.label is not None:
        parts.append(f"labelled {scale.name(which.label)}")
    if which.decided:
        parts.append("labelled good or bad")
    if which.predicted:
        parts.append(f"the model says {which.predicted} (threshold {query.threshold:g})")
    if which.score_low is not None or which.score_high is not None:
        low = which.score_low if which.score_low is not None else 0
        high = which.score_high if which.score_high is not None else 1
        parts.append(f"score {low:g} to {high:g}")
    if which.position is not None:
        names = cm.bucket_names(cm.POSITION_EDGES)
        parts.append(f"at position {names[min(which.position, len(names) - 1)]}")
    if which.length is not None:
        names = cm.bucket_names(cm.LENGTH_EDGES)
        parts.append(f"in trajectories of {names[min(which.length, len(names) - 1)]} steps")
    if which.outcome is not None:
        parts.append("of successful rollouts" if which.outcome else "of failed rollouts")
    return "Steps " + (", ".join(parts) if parts else "compared")


@login_required
@require_GET
def compare_first_errors(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project, form, which, context = _behind_forms(request, slug, FirstErrorFilterForm)
    if "errors" in context:
        return render(request, "evaluation/compare_first_errors.html", context, status=400)
    query = form.query
    subset = which.cleaned_data.get("subset") or "all"
    outcome = which.cleaned_data.get("outcome") or "all"
    rows, more = behind.first_error_page(
        query,
        compare.scale_for(project, schema=query.schema),
        subset=subset,
        outcome=outcome,
        page=form.page_number,
    )
    context.update(
        query=query,
        rows=rows,
        subset=behind.FIRST_ERROR_SETS[subset],
        outcome=behind.FIRST_ERROR_OUTCOMES[outcome],
        back=query_url("compare", project, query.params()),
        pages=page_links(request, form.page_number, more),
    )
    return render(request, "evaluation/compare_first_errors.html", context)


# --- Between humans -------------------------------------------------------------------------


@login_required
@require_GET
def compare_humans(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = compare_project(request, slug)
    try:
        piece = compare.slice_parse(request.GET.get("slice", ""))
    except ValueError:
        piece = None
    context: dict[str, Any] = {**base_context(request, project), "piece": piece}
    params = {"slice": str(piece) if piece else "", "schema": request.GET.get("schema", "").strip()}
    try:
        compare.label_schema_scope(project, params["schema"])  # said here, not by a worker
        # Agreement reads every label of the schema: kept, and made by a worker for a
        # large project while the page shows the kept figures with their age.
        kept = summary_kept(project, "humans", {k: v for k, v in params.items() if v})
    except ValueError as error:  # a schema the project lacks, or several to choose from
        context["error"] = str(error)
    else:
        context["kept"] = kept
        if kept.value is not None:
            context["humans"] = kept.value.agreement
            # Span labels follow a trajectory or annotator slice; a step-kind slice
            # leaves them over the whole project (the page says so).
            context["span_agreement"] = kept.value.spans
    context["span_sliced"] = piece is not None and span_slice_applies(piece)
    if request.htmx:
        return render(request, "evaluation/compare_humans.html#humans", context)
    return render(request, "evaluation/compare_humans.html", context)


# --- Decisive failures ---------------------------------------------------------------------


@login_required
@require_GET
def compare_decisive(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """Which agent, at which step, decided each failure: one decisive-failure source
    against another (an import or an annotator against a model or a second annotator),
    as agent accuracy and decisive-step accuracy (exact, and within k steps)."""
    project = compare_project(request, slug)
    choices = decisive_source_choices(project)
    form = DecisiveCompareForm(request.GET, choices=choices)
    context: dict[str, Any] = {**base_context(request, project), "form": form}
    if len(choices) >= 2 and form.is_valid():
        try:
            result = decisive.decisive_compare(
                project,
                reference=form.cleaned_data["reference"],
                candidate=form.cleaned_data["candidate"],
                k=form.cleaned_data["k"],
            )
        except ValueError as error:
            context["error"] = str(error)
        else:
            context.update(
                result=result,
                metrics=result.metrics,
                pairs=result.pairs[: decisive.PAIRS_SHOWN],
                more_pairs=max(len(result.pairs) - decisive.PAIRS_SHOWN, 0),
            )
    return render(request, "evaluation/compare_decisive.html", context)


# --- Disagreements --------------------------------------------------------------------------


@login_required
@require_GET
def compare_disagreements(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = compare_project(request, slug)
    options = compare.compare_options(project)
    form = CompareForm(request.GET, project=project, options=options)
    which = DisagreementForm(request.GET)
    context = {**base_context(request, project), "form": form, "which": which}
    if options.scorers and form.is_valid() and which.is_valid():
        query = form.query
        chosen = which.disagreement_filter()
        # Sorting every disagreeing step of the project by its gap (3 s at 1M steps):
        # kept, and made by a worker for a large project.
        kept = summary_kept(project, "disagreements", summary_params("disagreements", request.GET))
        rows, more = kept.value if kept.value is not None else ([], False)
        context.update(
            kept=kept,
            query=query,
            rows=rows,
            chosen=chosen,
            kind_name=disagreements.KINDS[chosen.kind],
            back=query_url("compare", project, query.params()),
            queue_action=query_url(
                "compare-disagreement-queue", project, {**query.params(), **chosen.params()}
            ),
            pages=page_links(request, form.page_number, more),
        )
    elif request.GET:
        context["errors"] = form_errors(form, which)
    return render(request, "evaluation/compare_disagreements.html", context)


@login_required
@require_POST
def compare_disagreement_queue(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """One click: a review queue over the trajectories of the listed disagreements."""
    project = compare_project(request, slug)
    if not selectors.is_reviewer(membership_role(request.user, project)):
        raise PermissionDenied("Only researchers and admins create queues.")
    options = compare.compare_options(project)
    form = CompareForm(request.GET, project=project, options=options)
    which = DisagreementForm(request.GET)
    back = query_url("compare-disagreements", project, request.GET.dict())
    if not (form.is_valid() and which.is_valid()):
        messages.error(
            request, "; ".join(str(e) for e in form.non_field_errors()) or "Check the comparison."
        )
        return HttpResponseRedirect(back)
    try:
        queue = disagreements.disagreement_queue_create(
            query=form.query,
            scale=compare.scale_for(project, schema=form.query.schema),
            which=which.disagreement_filter(),
            created_by=current_user(request),
        )
    except LabelingError as error:
        messages.error(request, error.message)
        return HttpResponseRedirect(back)
    count = queue.items.count()
    messages.success(request, f"Queue {queue.name!r} holds {count} trajectories.")
    return HttpResponseRedirect(reverse("queue-detail", args=[queue.pk]))


# --- Failures -------------------------------------------------------------------------------
