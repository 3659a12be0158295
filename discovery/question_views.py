"""The questions page of a project (ask, and the questions asked) and one question's
answer, which polls itself while the judge reads."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_http_methods

from discovery.question_forms import QuestionForm
from discovery.question_services import (
    QuestionError,
    question_ask,
    question_get_for_user,
    question_judges,
    questions_for_project,
)
from stepscope.jobs.lifecycle import job_cancel
from stepscope.jobs.views import JobRows
from stepscope.web import HtmxHttpRequest, current_user
from trajectories.selection import SelectionError
from trajectories.selectors import can_manage_data, project_get_for_user

RECENT = 20

# Each question's row on the questions page polls itself while the judge reads; Cancel
# (researchers and admins) stops the judge, keeping the answers stored so far.
_question_rows = JobRows(
    get_for_user=question_get_for_user,
    can_manage=can_manage_data,
    cancel=job_cancel,
    template="discovery/_question_row.html",
    page="question-list",
    name="question",
)
question_row = _question_rows.row_view()
question_cancel = _question_rows.cancel_view()


@login_required
@require_http_methods(["GET", "POST"])
def question_list(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = project_get_for_user(request.user, slug)
    can_ask = can_manage_data(request.user, project)
    form = QuestionForm(request.POST if request.method == "POST" else None, project=project)
    if request.method == "POST":
        if not can_ask:
            raise PermissionDenied("Only the project's admins and researchers ask questions.")
        if form.is_valid():
            data = form.cleaned_data
            try:
                question = question_ask(
                    project=project,
                    user=current_user(request),
                    text=data["text"],
                    judge=data["judge"],
                    filters=data["filters"],
                    limit=data["limit"],
                )
            except QuestionError as error:
                form.add_error(error.field, str(error))
            except SelectionError as error:
                form.add_error("filters", str(error))
            else:
                return redirect("question-detail", pk=question.pk)
    context = {
        "project": project,
        "form": form,
        "can_ask": can_ask,
        "can_manage": can_ask,
        "has_judges": question_judges(project).exists(),
        "questions": questions_for_project(project)[:RECENT],
    }
    return render(request, "discovery/questions.html", context, status=400 if form.errors else 200)


@login_required
@require_GET
def question_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    question = question_get_for_user(request.user, pk)
    answers = question.answers.select_related("trajectory", "step").order_by(
        "-matched", "problem", "-trajectory_id"
    )
    list_href = reverse("trajectory-list", args=[question.project.slug])
    context = {
        "project": question.project,
        "question": question,
        "matched": [answer for answer in answers if answer.matched],
        "unmatched": sum(1 for answer in answers if not answer.matched and not answer.problem),
        "problems": [answer for answer in answers if answer.problem],
        "filters_text": urlencode(question.filters),
        "list_href": f"{list_href}?{urlencode(question.filters)}",
        "can_ask": can_manage_data(request.user, question.project),
        "form": QuestionForm(
            initial={
                "text": question.text,
                "judge": question.judge_id,
                "filters": urlencode(question.filters),
                "limit": question.limit,
            },
            project=question.project,
        ),
    }
    template = "discovery/question.html"
    if request.htmx:
        template += "#answer"
    return render(request, template, context)
