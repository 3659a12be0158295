"""Asking a question in plain language (``discovery/questions.py``): the question is
stored and queued on its judge's queue; the worker has the judge propose a selection
(unless the asker gave one), reads the selection's first candidates to the judge one
trajectory at a time and stores each verdict as it comes, so a redelivered task goes on
from the answers already stored."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import F, QuerySet
from django.http import Http404
from django.utils import timezone

from discovery import questions
from discovery.question_models import Question, QuestionAnswer
from scoring import prm
from scoring.judges.backend import Reply, TooLong, judge_load
from scoring.judges.config import JudgeError
from scoring.judges.modes import JudgeRequest
from scoring.models import Scorer
from scoring.selectors import scorers_for_project
from scoring.services.judges import judge_spec
from stepscope.jobs.lifecycle import job_end, job_fail
from stepscope.jobs.models import ACTIVE, JobStatus
from trajectories.models import Project, Step, Trajectory
from trajectories.selection import (
    FILTERS,
    SelectionError,
    TrajectoryFilters,
    selection_parse,
    selection_query,
)
from trajectories.selectors import AnyUser, projects_for_user, trajectories_filtered

QUESTION_MAX_CHARS = 2000
LIMIT_MAX = 200
# The judge's reading of a question is one short JSON object.
PROPOSAL_KEY = "proposal"


class QuestionError(ValueError):
    """A question that cannot be asked; ``field`` names what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


def question_judges(project: Project) -> QuerySet[Scorer]:
    """The LLM judges a question in ``project`` may be asked of."""
    return scorers_for_project(project).filter(kind=prm.LLM_JUDGE).order_by("name", "revision")


def questions_for_project(project: Project) -> QuerySet[Question]:
    return Question.objects.filter(project=project).order_by("-created_at")


def question_get_for_user(user: AnyUser, pk: int) -> Question:
    """The question, for members of its project; outsiders get a 404."""
    question = (
        Question.objects.filter(pk=pk, project__in=projects_for_user(user))
        .select_related("project")
        .first()
        if user.is_authenticated
        else None
    )
    if question is None:
        raise Http404("No such question.")
    return question


def question_ask(
    *,
    project: Project,
    user: User,
    text: str,
    judge: Scorer,
    filters: Mapping[str, Any] | None = None,
    limit: int = 30,
) -> Question:
    """Store the question and queue it. ``filters``: the selection to read (the list's
    query string, e.g. a judge's earlier proposal the asker edited); None lets the judge
    propose one. Raises QuestionError or SelectionError naming what is wrong."""
    text = text.strip()
    if not text:
        raise QuestionError("text", "Ask a question.")
    if len(text) > QUESTION_MAX_CHARS:
        raise QuestionError("text", f"At most {QUESTION_MAX_CHARS} characters ({len(text)} given).")
    if not 1 <= limit <= LIMIT_MAX:
        raise QuestionError("limit", f"Between 1 and {LIMIT_MAX} trajectories.")
    if not question_judges(project).filter(pk=judge.pk).exists():
        raise QuestionError("judge", "Not an LLM judge of this project.")
    query: dict[str, str] = {}
    if filters is not None:
        query = selection_query(selection_parse(filters))
    with transaction.atomic():
        question = Question.objects.create(
            project=project,
            created_by=user,
            judge=judge,
            judge_name=str(judge),
            text=text,
            given_filters=filters is not None,
            filters=query,
            limit=limit,
        )
        queue = judge.queue or "default"
        transaction.on_commit(lambda: _enqueue(question.pk, queue))
    return question


def _enqueue(question_id: int, queue: str) -> None:
    from discovery import tasks

    tasks.question_answer.apply_async(args=[question_id], queue=queue)


def question_run(question_id: int) -> Question | None:
    """The worker's part: start the question (or go on with it, redelivered), propose
    its selection, judge its candidates; a judge that fails for good fails the question
    with the judge's message."""
    now = timezone.now()
    started = Question.objects.filter(pk=question_id, status__in=ACTIVE).update(
        status=JobStatus.RUNNING, started_at=now
    )
    if not started:
        return None
    question = Question.objects.select_related("project", "judge").get(pk=question_id)
    if question.judge is None:
        job_fail(Question, pk=question.pk, error="The judge was deleted.")
        return question
    try:
        judge = judge_load(judge_spec(question.judge))
        if not question.given_filters and not question.proposed:
            _propose(question, judge)
        _judge_candidates(question, judge)
    except JudgeError as error:
        job_fail(Question, pk=question.pk, error=error)
        return question
    question.refresh_from_db()
    if question.status == JobStatus.RUNNING:
        job_end(question, JobStatus.DONE)
    return question


def _ask_one(judge: Any, request: JudgeRequest) -> Reply | TooLong:
    answers: list[Reply | TooLong] = []
    judge.judge([request], lambda _request, reply: answers.append(reply), answers.append)
    return answers[0]


def _propose(question: Question, judge: Any) -> None:
    """The judge's reading of the question as a selection: the names the language takes
    become the question's filters, the others are kept with why they were refused."""
    request = JudgeRequest(
        key=PROPOSAL_KEY,
        trajectory=0,
        step=None,
        messages=questions.filter_messages(question.text),
    )
    reply = _ask_one(judge, request)
    if isinstance(reply, TooLong):
        raise JudgeError(f"The question does not fit the judge's context: {reply.reason}")
    try:
        proposal = questions.proposal_parse(reply.text)
    except questions.ReplyUnreadable as error:
        raise JudgeError(f"The judge's reading of the question is unreadable: {error}") from error
    allowed = {spec.name for spec in questions.proposable_filters()}
    refused = {
        name: "unknown filter" if FILTERS.get(name) is None else "not offered to the judge"
        for name in proposal.filters
        if name not in allowed
    }
    taken = {name: value for name, value in proposal.filters.items() if name not in refused}
    filters = TrajectoryFilters()
    try:
        filters = selection_parse(taken)
    except SelectionError as error:
        refused.update(error.errors)
        rest = {name: value for name, value in taken.items() if name not in error.errors}
        try:
            filters = selection_parse(rest)
        except SelectionError as again:
            refused.update(
                {name: again.errors.get(name, "refused with the others") for name in rest}
            )
    Question.objects.filter(pk=question.pk).update(
        proposed={"filters": proposal.filters, "criterion": proposal.criterion},
        refused=refused,
        criterion=proposal.criterion,
        filters=selection_query(filters),
    )
    question.refresh_from_db()


class _Cancelled(Exception):
    """The question was cancelled while its judge was being asked."""


def _judge_candidates(question: Question, judge: Any) -> None:
    """Ask the judge about every candidate not answered yet, at the judge's own
    concurrency, storing each verdict as it comes."""
    filters = selection_parse(question.filters)
    candidates = list(
        trajectories_filtered(question.project, filters)
        .order_by("-id")
        .values_list("id", flat=True)[: question.limit]
    )
    Question.objects.filter(pk=question.pk).update(total=len(candidates))
    answered = set(
        QuestionAnswer.objects.filter(question=question).values_list("trajectory_id", flat=True)
    )
    pending = [pk for pk in candidates if pk not in answered]
    requests = []
    step_ids: dict[int, dict[int, int]] = {}
    for trajectory_id, (task, steps) in _candidates_read(pending).items():
        request, step_ids[trajectory_id] = _candidate_request(question, trajectory_id, task, steps)
        requests.append(request)

    def on_reply(request: JudgeRequest, reply: Reply) -> None:
        indexes = step_ids[request.trajectory]
        try:
            verdict = questions.verdict_parse(reply.text, indexes)
        except questions.ReplyUnreadable as error:
            _answer_store(
                question, request, problem=f"{error}; the reply began {reply.text[:120]!r}"
            )
        else:
            step = indexes.get(verdict.step) if verdict.step is not None else None
            _answer_store(
                question, request, matched=verdict.matched, reason=verdict.reason, step_id=step
            )

    def on_too_long(too_long: TooLong) -> None:
        _answer_store(question, too_long.request, problem=f"too long: {too_long.reason}")

    try:
        judge.judge(requests, on_reply, on_too_long)
    except _Cancelled:
        return


_StepRow = tuple[int, int, str, str, str, str]


def _candidates_read(trajectory_ids: list[int]) -> dict[int, tuple[str, list[_StepRow]]]:
    """The task and the steps (id, index, kind, agent, content, tool) of each candidate,
    in the candidates' order: two queries however many candidates there are."""
    tasks = dict(Trajectory.objects.filter(pk__in=trajectory_ids).values_list("id", "task"))
    steps: dict[int, list[_StepRow]] = {pk: [] for pk in trajectory_ids}
    rows = (
        Step.objects.filter(trajectory_id__in=trajectory_ids)
        .order_by("trajectory_id", "index")
        .values_list("trajectory_id", "id", "index", "kind", "agent", "content", "tool_name")
    )
    for trajectory_id, *step in rows.iterator(chunk_size=5000):
        steps[trajectory_id].append(tuple(step))  # type: ignore[arg-type]
    return {pk: (tasks[pk], steps[pk]) for pk in trajectory_ids if pk in tasks}


def _candidate_request(
    question: Question, trajectory_id: int, task: str, steps: list[_StepRow]
) -> tuple[JudgeRequest, dict[int, int]]:
    """The judge's request about one trajectory, and its steps' ids by index."""
    shown = [
        questions.ShownStep(index, kind, agent, content or (f"{tool}(…)" if tool else ""))
        for _id, index, kind, agent, content, tool in steps
    ]
    request = JudgeRequest(
        key=f"t{trajectory_id}",
        trajectory=trajectory_id,
        step=None,
        messages=questions.candidate_messages(question.text, question.criterion, task, shown),
    )
    return request, {index: step_id for step_id, index, *_ in steps}


def _answer_store(question: Question, request: JudgeRequest, **fields: Any) -> None:
    """One candidate's answer and the question's counts, together; a question cancelled
    meanwhile stops the judge (what is stored stays)."""
    if not Question.objects.filter(pk=question.pk, status=JobStatus.RUNNING).exists():
        raise _Cancelled
    answer = QuestionAnswer(question=question, trajectory_id=request.trajectory, **fields)
    try:
        with transaction.atomic():
            answer.save()
            Question.objects.filter(pk=question.pk).update(
                done=F("done") + 1,
                matched=F("matched") + int(answer.matched),
                unreadable=F("unreadable") + int(bool(answer.problem)),
            )
    except IntegrityError:
        pass  # answered by an earlier delivery meanwhile
