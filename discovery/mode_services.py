"""Writes of failure modes: starting a run over a selection, the worker's run (first
errors by a label source, their step vectors, the clustering of ``discovery/modes.py``,
a judge's one-line description of each new mode), and cancelling one."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.utils import timezone

from discovery import store
from discovery.encoder import encoder_get
from discovery.models import FailureMode, FailureModeMember, FailureModeRun
from discovery.modes import Clustering, PreviousMode, failure_modes
from discovery.services import (
    embedding_model_current,
    encoder_configured,
    json_value,
    step_text,
)
from evaluation.compare import compare_options
from evaluation.failures import FAILED, first_errors
from labeling.sources import label_source_parse, label_source_sql
from scoring.judges.backend import Reply, judge_load
from scoring.judges.config import JudgeError
from scoring.judges.modes import JudgeRequest
from scoring.models import Scorer
from scoring.prm import LLM_JUDGE
from scoring.selectors import scorer_latest
from scoring.services.judges import judge_spec
from stepscope.jobs.lifecycle import job_cancel, job_end, job_fail
from stepscope.queueing import broker_require
from trajectories.models import Project, Trajectory
from trajectories.selection import (
    SelectionError,
    TrajectoryFilters,
    selection_definition,
    selection_parse,
)
from trajectories.selectors import selection_check, trajectories_filtered

logger = logging.getLogger(__name__)

# How many example steps a judge reads to describe a mode, and how much of each.
JUDGE_EXAMPLES = 5
JUDGE_STEP_CHARS = 600
DESCRIPTION_CHARS = 300


class FailureModeError(ValueError):
    """Bad input for a run, by field (``labels``, ``threshold``, ``judge``, a filter)."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


def failure_mode_run_start(
    *,
    project: Project,
    user: User | None,
    labels: str = "",
    threshold: float | None = None,
    filters: TrajectoryFilters | None = None,
    judge: str = "",
) -> FailureModeRun:
    """Queue a clustering of the first errors (by ``labels``, default the compare page's
    source) of ``filters``' trajectories (none: the failed ones, as the failures page
    counts them), described by the project's judge named ``judge`` when given.
    FailureModeError names what is wrong."""
    from discovery.tasks import failure_modes_run

    labels = labels or compare_options(project).default_labels
    try:
        source = label_source_parse(labels, threshold=0.5 if threshold is None else threshold)
        label_source_sql(project, source)
    except ValueError as error:
        raise FailureModeError({"labels": str(error)}) from None
    filters = filters or TrajectoryFilters()
    try:
        selection_check(project, filters)
    except SelectionError as error:
        raise FailureModeError(dict(error.errors)) from None
    scorer = _judge(project, judge) if judge else None
    broker_require()  # a dead broker is said now; no run is left queued
    with transaction.atomic():
        run = FailureModeRun.objects.create(
            project=project,
            label_source=str(source),
            threshold=source.threshold,
            selection=selection_definition(filters),
            judge=scorer,
            created_by=user,
        )
        # It may encode steps that have no vector yet: the embedding pass's queue.
        transaction.on_commit(
            lambda: failure_modes_run.apply_async(
                args=[run.pk], queue=settings.STEPSCOPE_EMBEDDING_QUEUE
            )
        )
    return run


def _judge(project: Project, name: str) -> Scorer:
    scorer = scorer_latest(project, name)
    if scorer is None or scorer.kind != LLM_JUDGE:
        raise FailureModeError(
            {"judge": f"no LLM judge named {name!r} in project {project.slug!r}"}
        )
    return scorer


def failure_mode_run_cancel(*, run: FailureModeRun) -> FailureModeRun:
    return job_cancel(run)


def run_trajectories(run: FailureModeRun) -> Any:
    """The trajectories a run clusters the first errors of."""
    filters = selection_parse(run.selection)
    chosen = trajectories_filtered(run.project, filters)
    return chosen.filter(FAILED) if filters.is_empty() else chosen


def failure_modes_execute(*, run_id: int) -> FailureModeRun:
    """The task's body: cluster, describe and store, or fail the run saying why. A run
    that has ended (or is cancelled meanwhile) is left as it is; a redelivered run starts
    again (nothing is stored before its one finishing transaction)."""
    run = FailureModeRun.objects.select_related("project", "judge").get(pk=run_id)
    if not run.is_active:
        return run
    FailureModeRun.objects.filter(pk=run.pk, status__in=FailureModeRun.ACTIVE).update(
        status=FailureModeRun.Status.RUNNING, started_at=run.started_at or timezone.now()
    )
    try:
        _execute(run)
    except Exception as error:  # recorded on the run for its row; the worker goes on
        logger.exception("failure-mode run %s failed", run.pk)
        job_fail(FailureModeRun, pk=run.pk, error=error)
    run.refresh_from_db()
    return run


def _execute(run: FailureModeRun) -> None:
    project = run.project
    source = label_source_parse(run.label_source, threshold=run.threshold)
    chosen = run_trajectories(run)
    firsts = first_errors(project, source, chosen)
    FailureModeRun.objects.filter(pk=run.pk).update(total=len(firsts))
    steps = [step for _, step in firsts]
    texts = _step_texts(steps)
    vectors = step_vectors(project, steps, texts)
    clustering = failure_modes(
        vectors, texts, [trajectory for trajectory, _ in firsts], previous=_previous(run)
    )
    descriptions = _describe(run.judge, clustering, texts) if run.judge else {}
    with transaction.atomic():
        if not job_end(
            run,
            FailureModeRun.Status.DONE,
            done=len(firsts),
            total=len(firsts),
            chosen=chosen.count(),
            k=len(clustering.modes),
            silhouette=clustering.silhouette,
        ):
            transaction.set_rollback(True)  # cancelled meanwhile: nothing is stored
            return
        for mode in clustering.modes:
            row = FailureMode.objects.create(
                run=run,
                number=mode.number,
                name=mode.name[:300],
                words=list(mode.words),
                description=descriptions.get(mode.number, mode.description),
                size=len(mode.members),
                share=len(mode.members) / len(firsts),
                examples=[steps[i] for i in mode.examples],
                kept=mode.previous is not None,
            )
            FailureModeMember.objects.bulk_create(
                FailureModeMember(mode=row, trajectory_id=firsts[i][0], step_id=firsts[i][1])
                for i in mode.members
            )


def _step_texts(step_ids: Sequence[int]) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s.id, s.content, s.tool_name, s.tool_args FROM trajectories_step s"
            " WHERE s.id = ANY(%s)",
            [list(step_ids)],
        )
        found = {row[0]: step_text(row[1], row[2], json_value(row[3])) for row in cursor.fetchall()}
    return [found[step] for step in step_ids]


def step_vectors(project: Project, step_ids: Sequence[int], texts: Sequence[str]) -> np.ndarray:
    """The steps' vectors: stored ones where pgvector holds them, the others encoded now
    (and stored, where pgvector is on, so the next run and semantic search have them)."""
    info = encoder_configured()
    vectors: dict[int, np.ndarray] = {}
    model = embedding_model_current(create=True) if store.pgvector_available() else None
    if model is not None:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT step_id, embedding::text FROM {store.STEP_TABLE}"
                " WHERE model_id = %s AND step_id = ANY(%s)",
                [model.pk, list(step_ids)],
            )
            for step, text in cursor.fetchall():
                vectors[step] = np.array(text.strip("[]").split(","), dtype=np.float32)
    missing = [i for i, step in enumerate(step_ids) if step not in vectors]
    if missing:
        encoded = encoder_get(info).encode([texts[i] for i in missing])
        for i, row in zip(missing, encoded, strict=True):
            vectors[step_ids[i]] = row
        if model is not None:
            trajectories = dict(
                Trajectory.objects.filter(steps__id__in=[step_ids[i] for i in missing])
                .values_list("steps__id", "id")
                .iterator()
            )
            with transaction.atomic():
                store.step_vectors_write(
                    model.pk, [(step_ids[i], trajectories[step_ids[i]]) for i in missing], encoded
                )
    if not step_ids:
        return np.zeros((0, 1), dtype=np.float32)
    return np.stack([vectors[step] for step in step_ids])


def _previous(run: FailureModeRun) -> list[PreviousMode]:
    """The modes of the project's latest finished run before this one."""
    before = (
        FailureModeRun.objects.filter(
            project_id=run.project_id, status=FailureModeRun.Status.DONE, pk__lt=run.pk
        )
        .order_by("-pk")
        .first()
    )
    if before is None:
        return []
    keys: dict[int, set[int]] = {}
    for mode_id, trajectory_id in FailureModeMember.objects.filter(mode__run=before).values_list(
        "mode_id", "trajectory_id"
    ):
        keys.setdefault(mode_id, set()).add(trajectory_id)
    return [
        PreviousMode(
            number=mode.number,
            name=mode.name,
            keys=frozenset(keys.get(mode.pk, ())),
            description=mode.description,
        )
        for mode in before.modes.all()
    ]


def description_prompt(words: Sequence[str], examples: Sequence[str]) -> str:
    shown = "\n\n".join(
        f"Example {i}:\n{text[:JUDGE_STEP_CHARS]}" for i, text in enumerate(examples, 1)
    )
    return (
        "Below are the first wrong steps of several failed runs of an LLM agent; they"
        f" fall in one group (its distinctive words: {', '.join(words) or 'none'}).\n\n"
        f"{shown}\n\nIn one line of at most 15 words, say what went wrong in these"
        " steps. Reply with that line only."
    )


def _describe(judge: Scorer, clustering: Clustering, texts: Sequence[str]) -> dict[int, str]:
    """A one-line description of each mode that has none (a mode kept from the run
    before keeps its own), by the judge; a judge that fails leaves them empty and says
    so in the log (the modes stand without)."""
    wanted = [mode for mode in clustering.modes if not mode.description]
    requests = []
    for mode in wanted:
        examples = [texts[i] for i in (*mode.examples, *mode.members)][:JUDGE_EXAMPLES]
        requests.append(
            JudgeRequest(
                key=f"m{mode.number}",
                trajectory=0,
                step=None,
                messages=({"role": "user", "content": description_prompt(mode.words, examples)},),
            )
        )
    found: dict[int, str] = {}

    def on_reply(request: JudgeRequest, reply: Reply) -> None:
        lines = [line.strip() for line in reply.text.strip().splitlines() if line.strip()]
        if lines:
            found[int(request.key[1:])] = lines[0][:DESCRIPTION_CHARS]

    if requests:
        try:
            judge_load(judge_spec(judge)).judge(requests, on_reply)
        except JudgeError as error:
            logger.warning("judge %s described no failure mode: %s", judge.name, error)
    return found
