"""Reading an export's trajectories: one consistent snapshot (REPEATABLE READ), a chunk
of trajectories at a time in task order, each step's label, score and credit by index
lookup, so memory does not grow with the export and the same data always gives the same
bytes; with a second connection reading ahead on the same snapshot."""

from __future__ import annotations

import contextlib
import json
import queue
import re
import threading
import uuid
from collections.abc import Generator, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models.functions import MD5

from exports.services.plan import ExportPlan
from exports.writers import (
    ExportStep,
    ExportTrajectory,
)
from exports.writers.inputs import ExportSpan
from labeling.rubric_sources import MAJORITY, rubric_source_exports, rubric_source_parse
from labeling.selectors.rubrics import rubric_exports
from trajectories.formats.base import ParsedDecisive, StepTraining
from trajectories.services.progress import ProgressWriter
from trajectories.services.projects import IMPORTED_ANNOTATOR_PREFIX

# Trajectories read per round trip.
EXPORT_CHUNK = 200


# Why a label source can give a step two labels (versions of one schema cannot: the
# newer supersedes), and what is left to say of it.
TWO_SCHEMAS = (
    "; its labels lie under two label schemas of the project (two names, not two"
    " versions of one), and an export does not choose between them"
)

# The trajectory columns trajectories_from_rows reads (``heads``), for an id array.
HEADS_SQL = (
    "SELECT id, external_id, task, task_key, ground_truth, model_name, outcome_reward,"
    " success, metadata, source_format, policy_version, training_step"
    " FROM trajectories_trajectory WHERE id = ANY(%s)"
)


# For the lossless format, the label source's annotator's verdict on each trajectory of a
# chunk (the last two parameters, a username and an id array): its first error, or -1 for a
# verdict that found none (a solution). The verdict an import writes for a record's
# ``first_error_index`` reads back the same way (labeling/imported.py).
VERDICTS_SQL = (
    "SELECT tl.trajectory_id, COALESCE(tl.first_error_index, -1)"
    " FROM labeling_trajectorylabel tl JOIN auth_user u ON u.id = tl.annotator_id"
    " WHERE u.username = %s AND tl.status = 'submitted'"
    " AND (tl.first_error_index IS NOT NULL OR tl.finish_reason = 'solution')"
    " AND tl.trajectory_id = ANY(%s)"
)


@dataclass(frozen=True, slots=True)
class TrajectoryVerdict:
    """What a chunk reads per trajectory beside its steps: the first error (for the
    lossless format) and the decisive failure (when the export carries one)."""

    first_error_index: int | None = None
    decisive: ParsedDecisive | None = None
    spans: tuple[ExportSpan, ...] = ()
    # One annotator's rubric results and episode verdicts (``options.rubric``).
    rubric: tuple[dict[str, Any], ...] = ()
    episode: tuple[dict[str, Any], ...] = ()


class ExportCancelled(Exception):
    pass


def export_trajectories(
    plan: ExportPlan,
    *,
    progress: ProgressWriter | None = None,
    read_ahead: bool = False,
) -> Iterator[ExportTrajectory]:
    """The selected trajectories in task order (task key, then task text, then id), each
    with its steps, resolved labels and, when asked for, scores and corrections.

    Must run inside a transaction. With ``read_ahead`` (for a transaction of its own, at
    REPEATABLE READ) a second connection reads the next chunks while this thread builds
    records from the last: it imports this transaction's snapshot, so both see exactly
    the same data, and PostgreSQL's work overlaps with Python's.
    """
    order = ordered_ids(plan)
    lossless = "annotators" in plan.reads
    if read_ahead:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_export_snapshot()")
            snapshot = cursor.fetchone()[0]
        chunks = _read_ahead(plan, order, snapshot)
    else:
        chunks = read_chunks(plan, order)
    try:
        for ids, heads, rows, verdicts in chunks:
            yield from trajectories_from_rows(ids, heads, rows, lossless, verdicts)
            progress_tick(progress, len(ids))
    finally:
        chunks.close()


# What one chunk reads: the trajectory ids in order, their rows, their steps' rows, and
# the trajectory-level verdicts (first error, decisive failure) by id.
Chunk = tuple[
    list[int], dict[int, tuple[Any, ...]], list[tuple[Any, ...]], dict[int, TrajectoryVerdict]
]


# Chunks the reading thread may hold before this thread takes them (bounded memory).
READ_AHEAD_CHUNKS = 2


_SNAPSHOT_ID = re.compile(r"[0-9A-Fa-f-]+")


def read_chunks(
    plan: ExportPlan, order: list[int], *, sample: bool = False
) -> Generator[Chunk, None, None]:
    """The rows of ``order``'s trajectories, a chunk at a time, on this thread's
    connection, with each step's values from :func:`step_values_table` (for a
    ``sample``, only those of ``order``'s steps)."""
    verdicts_of = plan.first_errors_of
    decisive = plan.decisive_sql
    # Whose rubric results the records carry: one annotator's (``human:<user>``, with
    # their episode verdicts) or another rubric source's (the annotators' majority, a
    # judge's rubric run), whose results alone.
    rubric_source = (
        rubric_source_parse(plan.request.options.rubric) if plan.request.options.rubric else None
    )
    rubric_of = (
        rubric_source.name
        if rubric_source and rubric_source.kind == "human" and rubric_source.name != MAJORITY
        else ""
    )
    with step_values_table(plan, order, only=order if sample else None) as table:
        steps_sql, extra_params = _steps_sql(plan, table)
        for first in range(0, len(order), EXPORT_CHUNK):
            ids = order[first : first + EXPORT_CHUNK]
            with connection.cursor() as cursor:
                cursor.execute(HEADS_SQL, [ids])
                heads = {row[0]: row for row in cursor.fetchall()}
                first_errors: dict[int, int] = {}
                if verdicts_of is not None:
                    cursor.execute(VERDICTS_SQL, [verdicts_of, ids])
                    first_errors = dict(cursor.fetchall())
                decisive_rows: dict[int, ParsedDecisive] = {}
                if decisive is not None:
                    cursor.execute(decisive[0], [*decisive[1], ids])
                    decisive_rows = {
                        trajectory_id: ParsedDecisive(agent=agent, step_index=step, reason=reason)
                        for trajectory_id, agent, step, reason in cursor.fetchall()
                    }
                span_rows: dict[int, list[ExportSpan]] = {}
                if "spans" in plan.reads:
                    cursor.execute(SPANS_SQL, [ids, ids])
                    for trajectory_id, *span, _ in cursor.fetchall():
                        span_rows.setdefault(trajectory_id, []).append(ExportSpan(*span))
                rubrics: dict[int, list[dict[str, Any]]] = {}
                episodes: dict[int, list[dict[str, Any]]] = {}
                if rubric_of:
                    rubrics, episodes = rubric_exports(rubric_of, ids)
                elif rubric_source is not None:
                    rubrics = rubric_source_exports(plan.project, rubric_source, ids)
                with_verdict = (
                    first_errors.keys()
                    | decisive_rows.keys()
                    | span_rows.keys()
                    | rubrics.keys()
                    | episodes.keys()
                )
                verdicts = {
                    trajectory_id: TrajectoryVerdict(
                        first_errors.get(trajectory_id),
                        decisive_rows.get(trajectory_id),
                        tuple(span_rows.get(trajectory_id, ())),
                        tuple(rubrics.get(trajectory_id, ())),
                        tuple(episodes.get(trajectory_id, ())),
                    )
                    for trajectory_id in with_verdict
                }
                cursor.execute(steps_sql, [*extra_params, ids])
                yield ids, heads, cursor.fetchall(), verdicts


@contextlib.contextmanager
def step_values_table(
    plan: ExportPlan, order: list[int], *, only: list[int] | None = None
) -> Iterator[str]:
    """A temporary table of ``(step_id, label, credit)``: the resolved labels and the
    chosen run's credits on the steps of ``order`` (the trajectories exported), a row
    per step, indexed, so that each step's values are one index lookup. With ``only``
    (trajectory ids), just their steps' rows. Yields its name; dropped at the end (or
    with the transaction)."""
    table = f"export_values_{uuid.uuid4().hex[:12]}"
    values_sql, values_params = step_values_sql(plan, order)
    if only is not None:
        values_sql = (
            f"SELECT * FROM ({values_sql}) v WHERE v.step_id IN"
            " (SELECT id FROM trajectories_step WHERE trajectory_id = ANY(%s))"
        )
        values_params = [*values_params, only]
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TEMP TABLE {table} ON COMMIT DROP AS {values_sql}", values_params)
        try:
            with transaction.atomic():
                cursor.execute(f"CREATE UNIQUE INDEX ON {table} (step_id)")
        except IntegrityError as error:
            detail = getattr(error.__cause__, "diag", None)
            raise ValueError(
                f"label source {plan.request.labels} gives some step more than one label"
                f" ({detail.message_detail if detail else error}){TWO_SCHEMAS}"
            ) from None
    # No ANALYZE: every read of the table is an index lookup by step (see _steps_sql).
    try:
        yield table
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {table}")


def _read_ahead(plan: ExportPlan, order: list[int], snapshot: str) -> Generator[Chunk, None, None]:
    """``read_chunks`` on a thread of its own, in a transaction that imports
    ``snapshot``, handing chunks over through a bounded queue. Closing this generator
    (the export finished, failed or was cancelled) stops the thread and waits for it."""
    if not _SNAPSHOT_ID.fullmatch(snapshot):
        raise ValueError(f"unexpected snapshot id {snapshot!r}")
    handed: queue.Queue[Chunk | BaseException | None] = queue.Queue(maxsize=READ_AHEAD_CHUNKS)
    stop = threading.Event()

    def hand(item: Chunk | BaseException | None) -> bool:
        while not stop.is_set():
            try:
                handed.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        # Django gives this thread a connection of its own; it is closed at the end.
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                cursor.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
                with closing(read_chunks(plan, order)) as chunks:
                    for chunk in chunks:
                        if not hand(chunk):
                            return
            hand(None)
        except BaseException as error:  # handed to the consuming thread, which raises it
            hand(error)
        finally:
            connection.close()

    reader = threading.Thread(target=read, name="export-reader", daemon=True)
    reader.start()
    try:
        while (item := handed.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        reader.join()


def ordered_ids(plan: ExportPlan) -> list[int]:
    """The selected trajectories' ids in the export's order (task key, task text, id)."""
    return list(
        plan.chosen.annotate(task_digest=MD5("task"))
        .order_by("task_key", "task_digest", "id")
        .values_list("id", flat=True)
    )


def trajectories_from_rows(
    ids: list[int],
    heads: dict[int, tuple[Any, ...]],
    rows: list[tuple[Any, ...]],
    lossless: bool,
    verdicts: dict[int, TrajectoryVerdict] | None = None,
) -> Iterator[ExportTrajectory]:
    """Snapshots of the trajectories ``ids``, in that order, from their rows (``heads``,
    by id), their steps' rows (in the column order of :func:`_steps_sql`) and their
    trajectory-level verdicts by id (first errors for the lossless format, decisive
    failures when the export carries them).

    The lossless format writes each annotator under the name an import maps back to the
    same user: the ``import:`` prefix the importer adds is taken off again, so a file
    that said ``alice`` says ``alice`` once more (and re-imports as ``import:alice``)."""
    verdicts = verdicts or {}
    steps: dict[int, list[ExportStep]] = {i: [] for i in ids}
    annotators: dict[int, list[list[tuple[str, int]]]] = {i: [] for i in ids}
    for row in rows:
        (
            trajectory_id,
            index,
            kind,
            role,
            agent,
            content,
            tool_name,
            tool_args,
            step_metadata,
            labelable,
            prefix_hash,
            label,
            score,
            credit,
            correction,
            by_annotator,
            critique,
            judgment,
            judge_verdict,
            *training,
        ) = row
        steps[trajectory_id].append(
            ExportStep(
                index=index,
                kind=kind,
                role=role,
                content=content,
                labelable=labelable,
                prefix_hash=prefix_hash,
                agent=agent,
                tool_name=tool_name,
                tool_args=None if tool_args is None else _json(tool_args),
                metadata=_json(step_metadata) or {},
                label=label,
                score=score,
                credit=credit,
                correction=correction or None,
                critique=critique,
                judgment=judgment,
                judge_verdict=judge_verdict,
                training=_training(training[0]) if training else None,
            )
        )
        if lossless:
            annotators[trajectory_id].append(
                sorted(
                    (name.removeprefix(IMPORTED_ANNOTATOR_PREFIX), value)
                    for name, value in (_json(by_annotator) or [])
                )
            )
    for trajectory_id in ids:
        (
            _,
            external_id,
            task,
            task_key,
            ground_truth,
            model_name,
            outcome_reward,
            success,
            metadata,
            source_format,
            *training_head,
        ) = heads[trajectory_id]
        policy_version, training_step = training_head or ("", None)
        per_annotator = annotators[trajectory_id]
        verdict = verdicts.get(trajectory_id, NO_VERDICT)
        yield ExportTrajectory(
            id=trajectory_id,
            external_id=external_id,
            task=task,
            task_key=task_key,
            ground_truth=ground_truth,
            model_name=model_name,
            outcome_reward=outcome_reward,
            success=success,
            metadata=_json(metadata) or {},
            source_format=source_format,
            steps=steps[trajectory_id],
            labels_by_annotator=per_annotator if lossless and any(per_annotator) else (),
            first_error_index=verdict.first_error_index,
            decisive=verdict.decisive,
            spans=verdict.spans,
            rubric=verdict.rubric,
            episode=verdict.episode,
            policy_version=policy_version or None,
            training_step=training_step,
        )


def _training(value: Any) -> StepTraining | None:
    """A step's training facts from :data:`STEP_TRAINING_SQL`'s array (None: none)."""
    facts = _json(value)
    if facts is None:
        return None
    version, step, total, mean, low, advantage, returns, tokens = facts
    return StepTraining(
        policy_version=version or None,
        training_step=step,
        logprob_sum=total,
        logprob_mean=mean,
        logprob_min=low,
        advantage=advantage,
        returns=returns,
        token_logprobs=tokens,
    )


# A step's training facts as one JSON array, NULL for a step without any: read by the
# lossless format only.
STEP_TRAINING_SQL = (
    "CASE WHEN s.policy_version = '' AND s.training_step IS NULL AND s.logprob_sum IS NULL"
    " AND s.logprob_mean IS NULL AND s.logprob_min IS NULL AND s.advantage IS NULL"
    " AND s.returns IS NULL AND s.token_logprobs IS NULL THEN NULL"
    " ELSE json_build_array(s.policy_version, s.training_step, s.logprob_sum, s.logprob_mean,"
    " s.logprob_min, s.advantage, s.returns, s.token_logprobs) END"
)


NO_VERDICT = TrajectoryVerdict()
# The span labels of a chunk's trajectories (the ``spans`` format), by start, longer
# first, then schema and annotator.
# Every annotator's spans, and the adjudicated ones under the label source's name
# ``human:adjudicated`` in the annotator's place (no username has a colon).
SPANS_SQL = (
    "SELECT * FROM ("
    " SELECT sl.trajectory_id, ss.name, sl.start_index, sl.end_index, sl.value,"
    " u.username AS who, sl.id"
    " FROM labeling_spanlabel sl"
    " JOIN labeling_spanschema ss ON ss.id = sl.schema_id"
    " JOIN auth_user u ON u.id = sl.annotator_id"
    " WHERE sl.trajectory_id = ANY(%s)"
    " UNION ALL"
    " SELECT fs.trajectory_id, ss.name, fs.start_index, fs.end_index, fs.value,"
    " 'human:adjudicated', fs.id"
    " FROM labeling_finalspan fs"
    " JOIN labeling_spanschema ss ON ss.id = fs.schema_id"
    " WHERE fs.trajectory_id = ANY(%s)"
    ") spans ORDER BY trajectory_id, start_index, end_index DESC, name, who, id"
)


def _json(value: Any) -> Any:
    """Django sets psycopg to hand JSON columns over as text; decode them here. (Most
    step metadata is empty: that case skips the decoder.)"""
    if value == "{}":
        return {}
    return json.loads(value) if isinstance(value, str) else value


def progress_tick(progress: ProgressWriter | None, amount: int) -> None:
    if progress is not None and progress.report(amount) and progress.status() == "cancelled":
        raise ExportCancelled


def step_values_sql(plan: ExportPlan, order: list[int]) -> tuple[str, list[Any]]:
    """``(step_id, label, credit)`` for every step the label source labels or the credit
    run credits on the trajectories of ``order``: one pass over each (hash joins), so
    that reading a step's values later is one lookup instead of one per table. The
    credits are read from the exported steps, not the run's: a run over the whole
    project has a credit on each of its steps (10M rows at 10M steps, #37)."""
    labels_sql, params = plan.labels_sql
    credit_run = plan.request.credit_run
    if credit_run is None:
        return (
            f"SELECT l.step_id, l.value AS label, NULL::float AS credit FROM ({labels_sql}) l",
            params,
        )
    return (
        "SELECT COALESCE(l.step_id, c.step_id) AS step_id, l.value AS label, c.value AS credit"
        f" FROM ({labels_sql}) l FULL JOIN"
        " (SELECT c.step_id, c.value FROM trajectories_step s"
        "  JOIN scoring_stepcredit c ON c.step_id = s.id AND c.run_id = %s"
        "  WHERE s.trajectory_id = ANY(%s)) c"
        " ON c.step_id = l.step_id",
        [*params, credit_run, order],
    )


def _steps_sql(plan: ExportPlan, values_table: str) -> tuple[str, list[Any]]:
    """Steps of a chunk of trajectories (the last parameter, an id array) in order, with
    the resolved label, the chosen scorer's score, the chosen attribution run's credit, a
    correction and per-annotator labels when the format uses them."""
    # Each per-step value is a lookup on a unique key whatever the tables' statistics say:
    # a correlated subquery, or a lateral one kept from being flattened into a join by
    # OFFSET 0. (As plain joins, the planner chose to scan the whole label and credit
    # tables for every chunk: quadratic in the export's size.)
    params: list[Any] = []
    score = "NULL::float"
    if plan.scorer_id is not None:
        score = (
            "(SELECT sc.value FROM scoring_stepscore sc"
            " WHERE sc.step_id = s.id AND sc.scorer_id = %s)"
        )
        params.append(plan.scorer_id)
    wants_corrections = "corrections" in plan.reads and plan.request.options.corrections
    correction = (
        "(SELECT c.correction FROM ("
        "   SELECT f.correction, 0 AS rank FROM labeling_finallabel f"
        "   WHERE f.step_id = s.id AND f.correction <> ''"
        "   UNION ALL"
        "   SELECT l.correction, 1 FROM labeling_steplabel l"
        "   WHERE l.step_id = s.id AND l.correction <> '' AND l.status = 'submitted'"
        " ) c ORDER BY c.rank LIMIT 1)"
        if wants_corrections
        else "NULL"
    )
    annotators = (
        "(SELECT json_agg(json_build_array(u.username, l.value) ORDER BY u.username)"
        " FROM labeling_steplabel l JOIN auth_user u ON u.id = l.annotator_id"
        " WHERE l.step_id = s.id AND l.status = 'submitted')"
        if "annotators" in plan.reads
        else "NULL"
    )
    # Step metadata (tool call ids, token logprobs) and prefix hashes are read only by the
    # formats that use them: chat messages and the lossless format, and sibling pairs.
    metadata = "s.metadata" if "metadata" in plan.reads else "NULL"
    prefix_hash = "s.prefix_hash" if "prefix_hashes" in plan.reads else "''"
    # The chosen judge's newest reply on the step that gave a verdict (a reply it could
    # not parse has none), through the (scorer, step) index.
    judge = "NULL, NULL, NULL::int"
    judge_join = ""
    if plan.judge_id is not None:
        judge = "j.critique, j.text, j.verdict"
        judge_join = (
            " LEFT JOIN LATERAL (SELECT jr.critique, jr.text, jr.verdict"
            " FROM scoring_judgereply jr WHERE jr.scorer_id = %s AND jr.step_id = s.id"
            " AND jr.parse_error = '' AND jr.verdict IS NOT NULL"
            " ORDER BY jr.id DESC LIMIT 1) j ON true"
        )
        params.append(plan.judge_id)
    training = STEP_TRAINING_SQL if "training" in plan.reads else "NULL"
    sql = (
        "SELECT s.trajectory_id, s.index, s.kind, s.role, s.agent, s.content, s.tool_name,"
        f" s.tool_args, {metadata}, s.labelable, {prefix_hash}, v.label,"
        f" {score}, v.credit, {correction}, {annotators}, {judge}, {training}"
        " FROM trajectories_step s"
        " LEFT JOIN LATERAL (SELECT r.label, r.credit FROM"
        f" {values_table} r WHERE r.step_id = s.id OFFSET 0) v ON true"
        f"{judge_join}"
        " WHERE s.trajectory_id = ANY(%s)"
        " ORDER BY s.trajectory_id, s.index"
    )
    return sql, params
