"""The judge alignment page: every prompt version of an LLM judge against a human label
source side by side, the disagreements of one version with the judge's critique beside
the human's rationale, "use as examples" (a new prompt version with chosen disagreements
as few-shot examples) and "score with this version".

Readers are those who may compare (outsiders 404, annotators 403 in a project that hides
labels or scores); making a version or starting a run is for researchers and admins.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from evaluation import alignment
from evaluation.compare import compare_options
from evaluation.views.common import base_context, compare_project, page_links
from scoring.models import JudgePrompt, Scorer
from scoring.services import ScoringError, scoring_run_start
from scoring.services.judge_examples import MAX_EXAMPLES, ExampleError, judge_examples_add
from stepscope.web import HtmxHttpRequest, current_user
from trajectories.models import Project
from trajectories.selectors import can_manage_data


def _judge(project: Project, pk: int) -> Scorer:
    try:
        return alignment.judge_for_project(project, pk)
    except alignment.NotFound as error:
        raise Http404(str(error)) from None


def _page_url(project: Project, scorer: Scorer, params: dict[str, str]) -> str:
    query = {k: v for k, v in params.items() if v}
    url = reverse("judge-alignment", args=[project.slug, scorer.pk])
    return url + ("?" + urlencode(query) if query else "")


def _page_number(text: str) -> int:
    return int(text) if text.isdigit() and 0 < int(text) < 100_000 else 1


@login_required
@require_GET
def judge_alignment(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    project = compare_project(request, slug)
    scorer = _judge(project, pk)
    options = compare_options(project)
    sources = alignment.human_sources(project, options.sources)
    context: dict[str, Any] = {
        **base_context(request, project),
        "scorer": scorer,
        "sources": sources,
        "decisive_choices": alignment.decisive_choices(project),
        "can_manage": can_manage_data(request.user, project),
        "max_examples": MAX_EXAMPLES,
    }
    source = request.GET.get("source", "") or options.default_labels
    context["source"] = source
    try:
        query = alignment.alignment_query_build(
            project, scorer, source=source, decisive=request.GET.get("decisive", "")
        )
    except ValueError as error:
        context["error"] = str(error)
        return render(request, "evaluation/judge_alignment.html", context, status=400)
    result = alignment.alignment_run(query)
    with_runs = [row for row in result.versions if row.runs]
    chosen = None
    version = request.GET.get("version", "")
    if version.isdigit():
        chosen = next((r for r in result.versions if r.prompt.version == int(version)), None)
        if chosen is None:
            context["error"] = f"version: {scorer.name!r} has no prompt version {version}"
            return render(request, "evaluation/judge_alignment.html", context, status=400)
    elif with_runs:
        chosen = with_runs[-1]
    page = _page_number(request.GET.get("page", "1"))
    listed: list[alignment.Disagreement] = []
    more = False
    if chosen is not None:
        listed, more = alignment.disagreements(query, result, chosen.prompt, page=page)
    context.update(
        query=query,
        result=result,
        chosen=chosen,
        disagreements=listed,
        pages=page_links(request, page, more),
        newest=result.versions[-1] if result.versions else None,
        version_rows=[
            {
                "row": row,
                "link": _page_url(
                    project, scorer, {**query.params(), "version": str(row.prompt.version)}
                ),
            }
            for row in result.versions
        ],
    )
    template = "evaluation/judge_alignment.html"
    if request.htmx and request.htmx.target == "alignment-body":
        template += "#alignment-body"
    return render(request, template, context)


def _managed(request: HtmxHttpRequest, slug: str, pk: int) -> tuple[Project, Scorer]:
    project = compare_project(request, slug)
    if not can_manage_data(request.user, project):
        raise PermissionDenied(
            "Making prompt versions and scoring need the researcher or admin role."
        )
    return project, _judge(project, pk)


@login_required
@require_POST
def judge_alignment_examples(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    """Chosen disagreements become few-shot examples of a new prompt version."""
    project, scorer = _managed(request, slug, pk)
    source = request.POST.get("source", "")
    back = {"source": source, "decisive": request.POST.get("decisive", "")}
    try:
        query = alignment.alignment_query_build(project, scorer, source=source)
        base_version = request.POST.get("version", "")
        base = JudgePrompt.objects.filter(
            scorer=scorer, version=int(base_version) if base_version.isdigit() else -1
        ).first()
        if base is None:
            raise ExampleError(f"version: {scorer.name!r} has no prompt version {base_version!r}")
        steps = request.POST.getlist("step")
        if not all(s.isdigit() for s in steps):
            raise ExampleError("step: step ids are whole numbers")
        made = judge_examples_add(
            project=project,
            scorer=scorer,
            base=base,
            step_ids=[int(s) for s in steps],
            source=query.source,
            user=current_user(request),
        )
    except (ValueError, ScoringError) as error:
        context = {
            **base_context(request, project),
            "scorer": scorer,
            "error": str(error),
            "back": _page_url(project, scorer, back),
        }
        return render(request, "evaluation/judge_alignment_error.html", context, status=400)
    messages.success(
        request,
        f"Prompt version {made.version} made from version {base.version} with"
        f" {len(made.example_steps) - len(base.example_steps)} example(s); score with it to see"
        " its figures (its examples' trajectories are left out of them).",
    )
    return HttpResponseRedirect(_page_url(project, scorer, back) + f"#version-{made.version}")


@login_required
@require_POST
def judge_alignment_score(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    """Start a scoring run of the project's steps with one prompt version."""
    project, scorer = _managed(request, slug, pk)
    version = request.POST.get("version", "")
    back = {"source": request.POST.get("source", ""), "decisive": request.POST.get("decisive", "")}
    try:
        if not version.isdigit():
            raise ScoringError(f"version: {version!r} is not a prompt version number")
        run = scoring_run_start(
            project=project,
            scorer=scorer,
            user=current_user(request),
            prompt_version=int(version),
        )
    except ScoringError as error:
        context = {
            **base_context(request, project),
            "scorer": scorer,
            "error": str(error),
            "back": _page_url(project, scorer, back),
        }
        return render(request, "evaluation/judge_alignment_error.html", context, status=400)
    messages.success(request, f"Scoring run {run.pk} started with prompt version {version}.")
    return HttpResponseRedirect(_page_url(project, scorer, back))
