"""The rubric compare page: one rubric source against another (an LLM judge's rubric run
against the annotators, one annotator against another), per criterion."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from evaluation.forms import RubricCompareForm
from evaluation.rubric_alignment import (
    AlignmentRefused,
    rubric_compare,
    rubric_for_alignment,
    rubric_sources_offered,
    rubric_versions,
)
from evaluation.views.common import base_context, compare_project
from labeling.selectors.rubrics import rubrics_active
from stepscope.web import HtmxHttpRequest


@login_required
@require_GET
def compare_rubrics(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """Per criterion of the chosen rubric: agreement, Cohen's kappa, the marks' confusion
    and the overlap of the evidence steps, on the trajectories both sources marked."""
    project = compare_project(request, slug)
    rubrics = [r.name for r in rubrics_active(project)]
    context: dict[str, Any] = base_context(request, project)
    choices: list[str] = []
    raw_version = request.GET.get("version", "")
    version = int(raw_version) if raw_version.isdigit() else None
    try:
        rubric = rubric_for_alignment(
            project, request.GET.get("rubric") or (rubrics or [""])[0], version
        )
    except AlignmentRefused as error:
        rubric = None
        if rubrics:
            context["error"] = str(error)
    versions: list[int] = []
    if rubric is not None:
        choices = rubric_sources_offered(rubric)
        versions = rubric_versions(rubric)
    form = RubricCompareForm(request.GET, rubrics=rubrics, choices=choices, versions=versions)
    context.update(form=form, rubric=rubric, rubrics=rubrics, choices=choices, versions=versions)
    if rubric is not None and len(choices) >= 2 and form.is_valid():
        try:
            context["result"] = rubric_compare(
                project,
                a=form.cleaned_data["a"],
                b=form.cleaned_data["b"],
                rubric=rubric.name,
                version=rubric.version,
            )
        except AlignmentRefused as error:
            context["error"] = str(error)
    return render(request, "evaluation/compare_rubrics.html", context)
