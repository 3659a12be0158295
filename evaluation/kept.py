"""Summaries of a whole project (the compare page's metrics, the failure overview, the
disagreements, agreement between humans, the review list, the project home's step
counts), kept.

Each is a pass over the project's labels and scores: tens of milliseconds at ten thousand
steps, seconds at a million (``bench/growth.py``). A summary is kept in ``KeptSummary``
with the marks of what it read (:mod:`rollouts.changes`) and shown again while those
marks hold. When they no longer hold, a project of up to
``STEPSCOPE_SUMMARY_INLINE_STEPS`` steps has it made again in the request; a larger one
has a worker make it, and the page shows the kept summary with its age meanwhile (or,
the first time, says it is being made and updates itself).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.http import QueryDict
from django.utils import timezone

from evaluation import compare, disagreements, failures
from evaluation.forms import CompareForm, DisagreementForm, FailureForm
from evaluation.models import KeptSummary
from evaluation.span_agreement import span_agreement_pairs
from labeling.models import LabelSchema
from labeling.selectors import review_candidates
from rollouts.changes import ProjectMarks, changed_since, project_marks
from trajectories.models import Project, Trajectory

# A worker that took a summary this long ago and has not finished is taken for lost: the
# next reader queues it again.
REFRESH_GIVEN_UP = timedelta(minutes=15)


def _failures(project: Project, params: Mapping[str, str]) -> failures.FailureOverview:
    form = FailureForm(_query(params), project=project, options=compare.compare_options(project))
    if not form.is_valid():
        raise ValueError(f"failure summary parameters {dict(params)!r}: {form.errors.as_text()}")
    return failures.failure_overview(
        project, form.cleaned_data["source"], piece=form.cleaned_data["piece"]
    )


def _compare(project: Project, params: Mapping[str, str]) -> compare.CompareResult:
    form = CompareForm(_query(params), project=project, options=compare.compare_options(project))
    if not form.is_valid():
        raise ValueError(f"compare parameters {dict(params)!r}: {form.errors.as_text()}")
    return compare.compare_run(form.query, by=form.cleaned_data.get("by") or "")


@dataclass(frozen=True)
class Humans:
    """The "between humans" page: label agreement (one schema, in a slice) and the span
    label agreement of every pair of annotators."""

    agreement: Any  # compare_metrics.HumanAgreement
    spans: list[Any]  # span_agreement.SpanSchemaAgreement


def _humans(project: Project, params: Mapping[str, str]) -> Humans:
    piece = compare.slice_parse(params.get("slice", ""))
    agreement = compare.human_agreement(project, piece, schema=params.get("schema", ""))
    return Humans(agreement=agreement, spans=span_agreement_pairs(project, piece))


def _disagreements(
    project: Project, params: Mapping[str, str]
) -> tuple[list[disagreements.Disagreement], bool]:
    query = _query(params)
    form = CompareForm(query, project=project, options=compare.compare_options(project))
    which = DisagreementForm(query)
    if not (form.is_valid() and which.is_valid()):
        errors = form.errors.as_text() + which.errors.as_text()
        raise ValueError(f"disagreement parameters {dict(params)!r}: {errors}")
    scale = compare.scale_for(project, schema=form.query.schema)
    return disagreements.disagreements_page(
        form.query, scale, which.disagreement_filter(), page=form.page_number
    )


def _review(project: Project, params: Mapping[str, str]) -> list[Trajectory]:
    schema = LabelSchema.objects.filter(project=project, pk=params.get("schema") or 0).first()
    if schema is None:
        raise ValueError(f"review summary parameters {dict(params)!r}: no such label schema")
    return review_candidates(project, schema)


# Each page's summary, from its query parameters, and the parameters it reads.
SUMMARIES: dict[str, tuple[Callable[[Project, Mapping[str, str]], Any], tuple[str, ...]]] = {
    "failures": (_failures, ("labels", "threshold", "slice")),
    "compare": (_compare, ("scorer", "labels", "threshold", "slice", "by")),
    "humans": (_humans, ("slice", "schema")),
    # One page of the steps where a scorer and the humans disagree most.
    "disagreements": (
        _disagreements,
        ("scorer", "labels", "threshold", "slice", "kind", "min_gap", "page"),
    ),
    # The review list: the trajectories two annotators labelled, most disagreements first.
    "review": (_review, ("schema",)),
}


def summary_register(
    page: str, make: Callable[[Project, Mapping[str, str]], Any], params: tuple[str, ...] = ()
) -> None:
    """Keep a higher app's summary of a whole project the same way (its ``ready()``
    registers it): ``make`` reads only labels, scores, jobs, members and trajectories,
    the marks this module watches."""
    if page in SUMMARIES and SUMMARIES[page][0] is not make:
        raise ValueError(f"a kept summary named {page!r} is registered already")
    SUMMARIES[page] = (make, params)


@dataclass(frozen=True)
class Kept:
    """A page's summary as it stands. ``value`` None: none made yet (a worker is on it).
    ``current``: made from what the project holds now. ``refreshing``: a worker is
    making it again."""

    value: Any
    made_at: datetime | None
    current: bool
    refreshing: bool
    seconds: float | None = None

    @property
    def age_seconds(self) -> float | None:
        return None if self.made_at is None else (timezone.now() - self.made_at).total_seconds()


def summary_params(page: str, query: Mapping[str, str]) -> dict[str, str]:
    """The parameters of ``page``'s summary in a request's query, the others left out."""
    _, names = SUMMARIES[page]
    return {name: query[name] for name in names if query.get(name)}


def summary_kept(
    project: Project, page: str, params: Mapping[str, str], *, keep_small: bool = True
) -> Kept:
    """``page``'s summary of the project for ``params``: the kept one when what it read
    has not changed, else made again here (a small project) or by a worker.
    ``keep_small=False``: a small project's summary is made here and not kept, so the
    page writes nothing (the project home: a read that wrote would pin its reader to the
    primary, ``stepscope/db_router.py``)."""
    params = dict(params)
    key = _key(page, params)
    marks = project_marks(project)
    row = KeptSummary.objects.filter(project=project, page=page, key=key).first()
    if (
        row is not None
        and row.value is not None
        and row.marks is not None
        and not changed_since(project, ProjectMarks.from_json(row.marks), marks)
    ):
        return Kept(_loaded(row), row.made_at, current=True, refreshing=False)
    if _inline(project):
        if keep_small:
            value = summary_make(project, page, params, marks)
        else:
            value = SUMMARIES[page][0](project, params)
        return Kept(value, timezone.now(), current=True, refreshing=False)
    if row is None:
        row = _row(project, page, key, params)
    refreshing = _refresh_queue(row) or row.refreshing_since is not None
    if not refreshing:  # no broker: made here, slowly, rather than never
        value = summary_make(project, page, params, marks)
        return Kept(value, timezone.now(), current=True, refreshing=False)
    value = _loaded(row) if row.value is not None else None
    return Kept(value, row.made_at, current=False, refreshing=True, seconds=row.seconds)


def summary_make(
    project: Project, page: str, params: Mapping[str, str], marks: ProjectMarks | None = None
) -> Any:
    """Make ``page``'s summary and keep it; ``marks`` read before (else here), so that a
    write during the making is seen by the next reader."""
    marks = marks or project_marks(project)
    make, _ = SUMMARIES[page]
    started = time.perf_counter()
    value = make(project, params)
    KeptSummary.objects.update_or_create(
        project=project,
        page=page,
        key=_key(page, params),
        defaults={
            "params": dict(params),
            "value": pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL),
            "marks": marks.as_json(),
            "made_at": timezone.now(),
            "seconds": time.perf_counter() - started,
            "refreshing_since": None,
            "error": "",
        },
    )
    return value


def summary_refresh(*, project_id: int, page: str, params: Mapping[str, str]) -> bool:
    """The worker's side: make the summary again. False if the project is gone; a summary
    whose parameters no longer hold (a scorer deleted) records why and is dropped from
    the queue."""
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        return False
    try:
        summary_make(project, page, params)
    except ValueError as error:
        KeptSummary.objects.filter(project=project, page=page, key=_key(page, params)).update(
            refreshing_since=None, error=str(error)
        )
        return False
    return True


# Whether the project holds more steps than a bound: its trajectories' step counts summed
# largest first (the project-and-length index, read backward) until the sum passes the
# bound, so a big project answers after its longest trajectories, not after all of them
# (13 ms to sum 58,000 trajectories, 2.5 ms to stop; more at 10M).
_STEPS_ABOVE_SQL = """SELECT EXISTS (
    SELECT 1 FROM (
        SELECT sum(step_count) OVER (ORDER BY step_count DESC ROWS UNBOUNDED PRECEDING) AS total
        FROM trajectories_trajectory WHERE project_id = %s
    ) running WHERE total > %s)"""


def _inline(project: Project) -> bool:
    """Whether the summary is made in the request: the project holds at most
    ``STEPSCOPE_SUMMARY_INLINE_STEPS`` steps."""
    with connection.cursor() as cursor:
        cursor.execute(_STEPS_ABOVE_SQL, [project.pk, settings.STEPSCOPE_SUMMARY_INLINE_STEPS])
        return not cursor.fetchone()[0]


def _row(project: Project, page: str, key: str, params: dict[str, str]) -> KeptSummary:
    try:
        with transaction.atomic():
            return KeptSummary.objects.create(project=project, page=page, key=key, params=params)
    except IntegrityError:  # another reader made it meanwhile
        return KeptSummary.objects.get(project=project, page=page, key=key)


def _refresh_queue(row: KeptSummary) -> bool:
    """Queue the worker's making unless one is under way; whether this call queued it."""
    from evaluation.tasks import summary_refresh_task
    from stepscope.queueing import send_if_up

    now = timezone.now()
    taken = (
        KeptSummary.objects.filter(pk=row.pk)
        .filter(Q(refreshing_since__isnull=True) | Q(refreshing_since__lt=now - REFRESH_GIVEN_UP))
        .update(refreshing_since=now)
    )
    if not taken:
        return False
    queued = send_if_up(
        summary_refresh_task,
        row.project_id,
        row.page,
        row.params,
        what=f"{row.page} summary of project {row.project_id}",
    )
    if not queued:
        KeptSummary.objects.filter(pk=row.pk).update(refreshing_since=None)
    row.refresh_from_db()
    return queued


def _loaded(row: KeptSummary) -> Any:
    # Written by summary_make only, never from a request's data.
    assert row.value is not None
    return pickle.loads(bytes(row.value))


def _query(params: Mapping[str, str]) -> QueryDict:
    query = QueryDict(mutable=True)
    query.update(params)
    return query


def _key(page: str, params: Mapping[str, str]) -> str:
    text = json.dumps([page, sorted(params.items())])
    return hashlib.sha256(text.encode()).hexdigest()
