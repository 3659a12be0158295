"""Model against human step labels: the queries behind the compare command, API and pages.

PostgreSQL does the joining: one pass over a scorer's scores on a project's labelable
steps, left-joined with a label source (:mod:`labeling.sources`, which resolves the
majority vote, the adjudicated labels... in SQL too), yields one row per scored step with
its reference label or none. Only the columns the maths needs (trajectory id, step index,
label, score and, for a breakdown, a small slice code) leave the database, packed into a
few arrays per column that numpy reads without a Python object per value (:func:`pull`).
The comparison reads the rows that have a reference label; outcome against process reads
them all. The numbers themselves come from :mod:`evaluation.compare_metrics`; the steps
behind each number from :mod:`evaluation.compare_steps`.

Slices narrow every query by one trajectory or step attribute (model, source format, task
key prefix, length bucket, step kind); the annotator slice compares with that annotator's
own labels instead of the chosen label source.
"""

from __future__ import annotations

import dataclasses
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import Exists, OuterRef

from evaluation import compare_metrics as cm
from labeling.models import LabelSchema, StepLabel, StepMajority
from labeling.selectors import active_schema
from labeling.sources import (
    IMPORTED_PREFIX,
    SCHEMA_KINDS,
    LabelSource,
    label_schema_first,
    label_schema_names,
    label_schema_scope,
    label_source_parse,
    label_source_sql,
)
from metrics.agreement import FirstErrorMetrics
from scoring.models import Scorer
from scoring.selectors import default_scorer, scorer_latest, scorers_for_project
from trajectories.models import Project, Step

DEFAULT_LABELS = "human:majority"
DEFAULT_THRESHOLD = 0.5
SLICE_DIMENSIONS = {
    "model": "model",
    "format": "source format",
    "task": "task key prefix",
    "length": "trajectory length",
    "kind": "step kind",
    "annotator": "annotator",
}
# The leading run of letters and digits of a task key: "gsm8k-123" and "gsm8k/7" are both
# "gsm8k". The same expression slices and breaks down, so a breakdown row's link shows
# exactly its steps.
TASK_PREFIX_SQL = "substring(t.task_key from '^[A-Za-z0-9]*')"
# 1 success, 0 failure, -1 unknown: ``success`` when set, else a positive outcome reward.
OUTCOME_SQL = "COALESCE(t.success::int, (t.outcome_reward > 0)::int, -1)"
LENGTH_BUCKET_SQL = f"width_bucket(t.step_count, ARRAY{list(cm.LENGTH_EDGES[1:])})"
POSITION_BUCKET_SQL = f"width_bucket(s.index, ARRAY{list(cm.POSITION_EDGES[1:])})"
# A breakdown by a text attribute shows the most frequent values only, counted among the
# project's newest this many trajectories: the options of every compare and failure page
# were three passes over all of them (0.3 s at 1M steps, seconds at 10M, #37). A project
# of up to 20,000 trajectories (some 340,000 steps) has all its values counted.
SLICE_VALUES_SHOWN = 30
SLICE_SAMPLE_TRAJECTORIES = 20_000
PREVIEW_CHARS = 160
LIST_PAGE_SIZE = 100
# Planner settings for comparisons over big projects, local to their transaction. Every
# query here reads most of a project's steps, scores and labels; over a million rows,
# merge joins along the (step, trajectory) indexes cost a third of the CPU of hash joins
# or of parallel plans (whose workers re-sort the same rows) on a small machine, and the
# planner, misled by a label source's aggregate estimated at a few thousand rows, picks
# neither of those well by itself. JIT compilation only adds time to one-off queries.
# Small projects keep the planner's own choice: index lookups beat any full scan there.
BIG_PROJECT_STEPS = 200_000
BIG_JOIN_SETTINGS = (
    "SET LOCAL enable_hashjoin = off",
    "SET LOCAL enable_nestloop = off",
    "SET LOCAL max_parallel_workers_per_gather = 0",
    "SET LOCAL jit = off",
    "SET LOCAL work_mem = '64MB'",
)


# --- What to compare ----------------------------------------------------------------------


@dataclass(frozen=True)
class Slice:
    dimension: str
    value: str

    def __str__(self) -> str:
        return f"{self.dimension}={self.value}"


def slice_parse(text: str) -> Slice | None:
    """``"model=gpt-4o"`` → a slice; ``""`` → none. A ValueError says what is accepted."""
    text = text.strip()
    if not text:
        return None
    dimension, sep, value = text.partition("=")
    if not sep or dimension not in SLICE_DIMENSIONS:
        raise ValueError(
            f"unknown slice {text!r}; use DIMENSION=VALUE with one of "
            + ", ".join(SLICE_DIMENSIONS)
        )
    if dimension == "length" and not (value.isdigit() and int(value) < len(cm.LENGTH_EDGES)):
        raise ValueError(
            f"a length slice is a bucket number 0..{len(cm.LENGTH_EDGES) - 1}"
            f" ({', '.join(cm.bucket_names(cm.LENGTH_EDGES))})"
        )
    return Slice(dimension, value)


@dataclass(frozen=True)
class CompareQuery:
    project: Project
    scorer: Scorer
    source: LabelSource
    threshold: float = DEFAULT_THRESHOLD
    slice: Slice | None = None
    # The label schema (by name) the reference reads, resolved from the source: the
    # project's one schema where the source names none.
    schema: str = ""

    @property
    def reference(self) -> LabelSource:
        """The labels compared with: the annotator slice uses that annotator's own."""
        if self.slice is not None and self.slice.dimension == "annotator":
            return LabelSource("human", self.slice.value, schema=self.source.schema)
        return self.source

    def params(self) -> dict[str, str]:
        """The query as the pages' and the API's parameters."""
        params = {
            "scorer": self.scorer.name,
            "labels": source_param(self.source),
            "threshold": f"{self.threshold:g}",
        }
        if self.slice is not None:
            params["slice"] = str(self.slice)
        return params


def source_param(source: LabelSource) -> str:
    """A label source as ``--labels`` and the pages spell it (with its schema's name
    where it names one)."""
    return source.text()


def source_schema(project: Project, source: LabelSource) -> str:
    """The name of the label schema ``source`` reads: the one it names, else the
    project's one schema; for a model or Monte Carlo source (no schema), the project's
    first schema, whose values the comparison shows. A ValueError names a schema the
    project lacks, or the ones to choose from."""
    if source.kind in SCHEMA_KINDS:
        return label_schema_scope(project, source.schema).name
    first = label_schema_first(project)
    return first.name if first is not None else ""


def compare_query_build(
    project: Project,
    *,
    scorer: str,
    labels: str = DEFAULT_LABELS,
    threshold: float = DEFAULT_THRESHOLD,
    slice_text: str = "",
) -> CompareQuery:
    """Resolve the parameters the command, the API and the pages take; a ValueError
    names what is wrong."""
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold {threshold:g} is outside 0..1")
    found = scorer_latest(project, scorer)
    if found is None:
        raise ValueError(f"no scorer named {scorer!r} in project {project.slug!r}")
    source = label_source_parse(labels or DEFAULT_LABELS, threshold=threshold, scorer=scorer)
    query = CompareQuery(
        project, found, source, threshold, slice_parse(slice_text), source_schema(project, source)
    )
    # Resolving the SQL checks that a named annotator or scorer exists.
    label_source_sql(project, query.reference)
    return query


def scale_for(project: Project, observed: Sequence[float] = (), *, schema: str = "") -> cm.Scale:
    """The values of schema ``schema`` (its newest version; without a name the project's
    active schema) in order, plus any other value the labels hold (from an older
    schema version), so no label is ever dropped from a matrix."""
    found = (
        LabelSchema.objects.filter(project=project, name=schema)
        .order_by("-is_active", "-version", "-id")
        .first()
        if schema
        else active_schema(project)
    )
    return _scale(found, observed)


def _scale(schema: LabelSchema | None, observed: Sequence[float]) -> cm.Scale:
    entries = schema.entries if schema else []
    values = [int(e["value"]) for e in entries]
    names = [str(e["name"]) for e in entries]
    for value in sorted({int(v) for v in observed if np.isfinite(v)} - set(values)):
        values.append(value)
        names.append(str(value))
    if not values:
        values, names = [-1, 1], ["bad", "good"]
    error = schema.error_value if schema is not None else None
    ordinal = schema is None or schema.kind in (
        LabelSchema.Kind.TERNARY,
        LabelSchema.Kind.ORDINAL,
    )
    return cm.Scale(
        values=tuple(values),
        names=tuple(names),
        bad=error if error is not None else min(values),
        good=max(values),
        ordinal=ordinal,
    )


# --- Who may compare, and what there is to pick -------------------------------------------


@dataclass(frozen=True)
class CompareOptions:
    """What the compare forms offer: scorers, label sources and slices, as
    ``(value, name)`` choices."""

    scorers: list[tuple[str, str]]
    default_scorer: str
    sources: list[tuple[str, str]]
    slices: list[tuple[str, list[tuple[str, str]]]]
    # The humans' majority once anyone has labelled; before that, the first imported
    # source that labels the project (a fresh import's truth), so the pages open on data.
    default_labels: str = DEFAULT_LABELS


def compare_options(project: Project) -> CompareOptions:
    """A handful of small queries: scorers, members, import sources that labelled in
    the project, and the slice values found among its trajectories."""
    scorers = sorted({s.name for s in scorers_for_project(project).only("name")})
    default = default_scorer(project)
    members = list(
        User.objects.filter(memberships__project=project)
        .order_by("username")
        .values_list("username", flat=True)
    )
    imported = list(
        User.objects.filter(username__startswith=IMPORTED_PREFIX)
        .filter(Exists(StepLabel.objects.filter(annotator=OuterRef("pk"), schema__project=project)))
        .order_by("username")
        .values_list("username", flat=True)[:SLICE_VALUES_SHOWN]
    )
    # A project with several label schemas offers each people's source per schema.
    schemas = label_schema_names(project)
    named = [("", "")] if len(schemas) <= 1 else [(f"/{n}", f" ({n})") for n in schemas]
    sources = [
        *[(f"human:majority{at}", f"humans: majority{of}") for at, of in named],
        *[(f"human:adjudicated{at}", f"humans: adjudicated{of}") for at, of in named],
        *[(f"human:{name}{at}", f"annotator {name}{of}") for name in members for at, of in named],
        *[
            (f"{name}{at}", f"imported: {name.removeprefix(IMPORTED_PREFIX)}{of}")
            for name in imported
            for at, of in named
        ],
        *[(f"model:{name}", f"scorer {name}") for name in scorers],
    ]
    slices: list[tuple[str, list[tuple[str, str]]]] = []
    for dimension, title in SLICE_DIMENSIONS.items():
        if dimension == "annotator":
            values = [(name, name) for name in members]
        else:
            values = slice_groups(project, dimension)[2]
        if values:
            slices.append((title, [(f"{dimension}={value}", name) for value, name in values]))
    humans = StepMajority.objects.filter(project=project).exists()
    return CompareOptions(
        scorers=[(name, name) for name in scorers],
        default_scorer=default.name if default else (scorers[0] if scorers else ""),
        sources=sources,
        slices=slices,
        default_labels=(DEFAULT_LABELS if humans or not imported else imported[0]) + named[0][0],
    )


# --- SQL ----------------------------------------------------------------------------------


def slice_sql(piece: Slice | None) -> tuple[str, list[Any]]:
    """`` AND ...`` narrowing rows of ``trajectories_step s`` / ``trajectories_trajectory t``."""
    if piece is None or piece.dimension == "annotator":
        return "", []
    if piece.dimension == "model":
        return " AND t.model_name = %s", [piece.value]
    if piece.dimension == "format":
        return " AND t.source_format = %s", [piece.value]
    if piece.dimension == "task":
        return f" AND {TASK_PREFIX_SQL} = %s", [piece.value]
    if piece.dimension == "length":
        return f" AND {LENGTH_BUCKET_SQL} = %s", [int(piece.value)]
    return " AND s.kind = %s", [piece.value]


def base_sql(query: CompareQuery) -> tuple[str, list[Any]]:
    """``FROM ... WHERE ...`` over the labelable steps with a reference label (``r``) and
    a score (``sc``), with their step (``s``) and trajectory (``t``)."""
    ref_sql, ref_params = label_source_sql(query.project, query.reference)
    where, where_params = slice_sql(query.slice)
    return (
        f" FROM ({ref_sql}) r"
        " JOIN trajectories_step s ON s.id = r.step_id"
        " JOIN scoring_stepscore sc ON sc.step_id = s.id AND sc.scorer_id = %s"
        " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
        " WHERE s.labelable AND t.project_id = %s" + where,
        [*ref_params, query.scorer.pk, query.project.pk, *where_params],
    )


_COLUMN_TYPES = {"int4": ">i4", "int8": ">i8", "float8": ">f8"}
_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
# Rows are spread over this many arrays per column (by the first column), which keeps
# each array far under PostgreSQL's 1 GB limit on a value.
PULL_CHUNKS = 16


def pull(sql: str, params: Sequence[Any], columns: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The rows of ``sql`` as one numpy array per column, in no particular order.

    PostgreSQL packs each column into a few arrays (``array_agg``) sent in their binary
    form, which numpy reads with one ``frombuffer`` each: a million rows cost a few dozen
    messages instead of a million, and no Python object per value. Every column must be
    NOT NULL and cast to the named fixed-width type (``int4``, ``int8``, ``float8``); the
    first must be an integer."""
    aliases = [f"c{i}" for i in range(len(columns))]
    packed = ", ".join(f"array_send(array_agg({alias}))" for alias in aliases)
    statement = (
        f"SELECT {packed} FROM ({sql}) q({', '.join(aliases)})"
        f" GROUP BY mod({aliases[0]}, {PULL_CHUNKS})"
    )
    with (
        connection.cursor() as wrapper,
        wrapper.cursor.copy(f"COPY ({statement}) TO STDOUT (FORMAT binary)", params) as copy,
    ):
        data = b"".join(bytes(block) for block in copy)
    if not data.startswith(_COPY_SIGNATURE):
        raise RuntimeError("not a binary COPY stream")
    (extension,) = struct.unpack_from(">i", data, len(_COPY_SIGNATURE) + 4)
    position = len(_COPY_SIGNATURE) + 8 + extension
    parts: list[list[Any]] = [[] for _ in columns]
    view = memoryview(data)
    while True:
        (fields,) = struct.unpack_from(">h", data, position)
        position += 2
        if fields == -1:
            break
        for i, (_, kind) in enumerate(columns):
            (size,) = struct.unpack_from(">i", data, position)
            position += 4
            parts[i].append(_array(view[position : position + size], _COLUMN_TYPES[kind]))
            position += size
    return {
        name: (np.concatenate(chunks) if chunks else np.zeros(0, dtype=_COLUMN_TYPES[kind][1:]))
        for (name, kind), chunks in zip(columns, parts, strict=True)
    }


def _array(packed: memoryview, element: str) -> Any:
    """A one-dimensional array in PostgreSQL's binary form (``array_send``): a 20-byte
    header, then each element as a 4-byte length and its big-endian value."""
    dimensions, has_nulls = struct.unpack_from(">ii", packed, 0)
    if dimensions == 0:
        return np.zeros(0, dtype=element[1:])
    if dimensions != 1 or has_nulls:
        raise RuntimeError("a pulled column is NULL or not one-dimensional")
    items = np.frombuffer(packed[20:], dtype=np.dtype([("size", ">i4"), ("value", element)]))
    return items["value"].astype(element[1:])


def big_joins(project: Project) -> None:
    """Apply :data:`BIG_JOIN_SETTINGS` to the current transaction (they end with it) when
    the project has more than :data:`BIG_PROJECT_STEPS` steps."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COALESCE(sum(step_count), 0) FROM trajectories_trajectory"
            " WHERE project_id = %s",
            [project.pk],
        )
        (steps,) = cursor.fetchone() or (0,)
        if steps > BIG_PROJECT_STEPS:
            for statement in BIG_JOIN_SETTINGS:
                cursor.execute(statement)


# --- Breakdowns ---------------------------------------------------------------------------


def slice_groups(project: Project, by: str) -> tuple[str, list[Any], list[tuple[str, str]]]:
    """For a breakdown by ``by``: an SQL expression giving each row's position in the
    returned ``(value, name)`` groups (-1 for a value not shown), and its parameters."""
    if by == "length":
        names = cm.bucket_names(cm.LENGTH_EDGES)
        return LENGTH_BUCKET_SQL, [], [(str(i), name) for i, name in enumerate(names)]
    if by == "kind":
        values = list(Step.Kind.values)
        expression = "s.kind"
    elif by in ("model", "format", "task"):
        expression = {
            "model": "t.model_name",
            "format": "t.source_format",
            "task": TASK_PREFIX_SQL,
        }[by]
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {expression} AS v FROM (SELECT * FROM trajectories_trajectory"
                " WHERE project_id = %s ORDER BY id DESC LIMIT %s) t"
                " GROUP BY v ORDER BY count(*) DESC, v LIMIT %s",
                [project.pk, SLICE_SAMPLE_TRAJECTORIES, SLICE_VALUES_SHOWN],
            )
            values = [row[0] for row in cursor.fetchall()]
    else:
        raise ValueError(f"unknown breakdown {by!r}; use one of {', '.join(SLICE_DIMENSIONS)}")
    return (
        f"COALESCE(array_position(%s::text[], {expression}::text), 0) - 1",
        [values],
        [(v, v or "(none)") for v in values],
    )


# --- The comparison -----------------------------------------------------------------------


@dataclass(frozen=True)
class CompareResult:
    query: CompareQuery
    scale: cm.Scale
    metrics: cm.Metrics
    by: str
    slices: list[cm.SliceRow]
    outcome: cm.OutcomeProcess | None
    humans: cm.HumanAgreement | None
    seconds: float

    @property
    def steps(self) -> int:
        return self.metrics.steps

    @property
    def trajectories(self) -> int:
        return self.metrics.trajectories

    @property
    def kappa(self) -> float:
        return self.metrics.kappa

    @property
    def auroc(self) -> float:
        return self.metrics.auroc

    @property
    def first_error(self) -> FirstErrorMetrics:
        return self.metrics.first_error

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "project": self.query.project.slug,
            "scorer": self.query.scorer.name,
            "scorer_id": self.query.scorer.pk,
            "labels": str(self.query.reference),
            "schema": self.query.schema or None,
            "slice": str(self.query.slice) if self.query.slice else None,
        }
        data.update(self.metrics.as_json(self.scale))
        data["by"] = self.by or None
        data["slices"] = [row.as_json() for row in self.slices]
        data["outcome"] = self.outcome.as_json() if self.outcome else None
        if self.humans is not None:
            data["humans"] = self.humans.as_json()
        data["seconds"] = round(self.seconds, 3)
        return data


def compare_run(
    query: CompareQuery,
    *,
    by: str = "",
    sweep: bool = True,
    outcome: bool = True,
    humans: bool = False,
) -> CompareResult:
    """Model against the reference labels over the query's steps, with a breakdown by
    the slice dimension ``by`` when given, outcome against process, and (``humans``)
    agreement among the annotators.

    One pass over the scored steps serves both analyses: the comparison reads the rows
    that have a reference label, outcome against process reads them all."""
    start = time.perf_counter()
    with transaction.atomic():
        big_joins(query.project)
        scored, groups = pull_scored_steps(query, by="" if by == "annotator" else by)
        rows = scored.take(~np.isnan(scored.label))
        scale = scale_for(query.project, np.unique(rows.label).tolist(), schema=query.schema)
        metrics = cm.model_human_metrics(rows, scale, threshold=query.threshold, sweep=sweep)
        slices: list[cm.SliceRow] = []
        if by == "annotator":
            slices = annotator_slices(query, scale)
        elif by:
            slices = cm.slice_rows(rows, scale, groups, threshold=query.threshold)
        process = (
            cm.outcome_process(scored, trajectory_outcomes(query.project)) if outcome else None
        )
        agreement = (
            human_agreement(query.project, query.slice, scale=scale, schema=query.schema)
            if humans
            else None
        )
    return CompareResult(
        query=query,
        scale=scale,
        metrics=metrics,
        by=by,
        slices=slices,
        outcome=process,
        humans=agreement,
        seconds=time.perf_counter() - start,
    )


_ROW_COLUMNS = [
    ("trajectory", "int8"),
    ("index", "int4"),
    ("label", "int4"),
    ("score", "float8"),
    ("group", "int4"),
]
# Stands for "no reference label" in the int4 label column; the arrays get NaN.
_NO_LABEL = -(2**31)


def pull_scored_steps(
    query: CompareQuery, *, by: str = ""
) -> tuple[cm.StepRows, list[tuple[str, str]]]:
    """One row per scored labelable step in the query's slice, with its reference label
    (NaN where there is none), sorted by trajectory and step index; with ``by``, each
    row's group and the groups."""
    group_sql, group_params, groups = "", list[Any](), list[tuple[str, str]]()
    if by:
        group_sql, group_params, groups = slice_groups(query.project, by)
    ref_sql, ref_params = label_source_sql(query.project, query.reference)
    where, where_params = slice_sql(query.slice)
    columns = pull(
        "SELECT s.trajectory_id::int8, s.index::int4, COALESCE(r.value, %s)::int4,"
        " sc.value::float8"
        + (f", ({group_sql})::int4" if by else "")
        + " FROM scoring_stepscore sc"
        " JOIN trajectories_step s ON s.id = sc.step_id"
        " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
        f" LEFT JOIN ({ref_sql}) r ON r.step_id = s.id"
        " WHERE sc.scorer_id = %s AND t.project_id = %s AND s.labelable" + where,
        [
            _NO_LABEL,
            *group_params,
            *ref_params,
            query.scorer.pk,
            query.project.pk,
            *where_params,
        ],
        _ROW_COLUMNS if by else _ROW_COLUMNS[:-1],
    )
    return _rows(columns), groups


def _rows(columns: dict[str, Any]) -> cm.StepRows:
    label = columns["label"].astype(np.float64)
    label[columns["label"] == _NO_LABEL] = np.nan
    trajectory = columns["trajectory"].astype(np.int64)
    group = columns.get("group")
    return cm.StepRows(
        trajectory=trajectory,
        index=columns["index"].astype(np.int64),
        label=label,
        score=columns["score"].astype(np.float64),
        group=np.zeros_like(trajectory) if group is None else group.astype(np.int64),
    ).sort()


def trajectory_outcomes(project: Project) -> cm.TrajectoryOutcomes:
    """Every trajectory of the project: id, outcome (1 / 0 / -1 unknown), length bucket."""
    columns = pull(
        f"SELECT t.id::int8, ({OUTCOME_SQL})::int4, {LENGTH_BUCKET_SQL}::int4"
        " FROM trajectories_trajectory t WHERE t.project_id = %s",
        [project.pk],
        [("id", "int8"), ("outcome", "int4"), ("length", "int4")],
    )
    order = np.argsort(columns["id"])
    return cm.TrajectoryOutcomes(
        trajectory=columns["id"][order].astype(np.int64),
        outcome=columns["outcome"][order].astype(np.int64),
        length_bucket=columns["length"][order].astype(np.int64),
    )


def annotator_slices(query: CompareQuery, scale: cm.Scale) -> list[cm.SliceRow]:
    """The headline metrics against each human annotator's own labels."""
    where, where_params = slice_sql(query.slice)
    columns = pull(
        "SELECT s.trajectory_id::int8, s.index::int4, l.value::int4, sc.value::float8,"
        " l.annotator_id::int4"
        " FROM labeling_steplabel l"
        " JOIN auth_user u ON u.id = l.annotator_id"
        " JOIN trajectories_step s ON s.id = l.step_id"
        " JOIN scoring_stepscore sc ON sc.step_id = s.id AND sc.scorer_id = %s"
        " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
        " WHERE s.labelable AND t.project_id = %s AND l.status = 'submitted'"
        " AND l.schema_id = ANY(%s) AND u.username NOT LIKE 'import:%%'" + where,
        [
            query.scorer.pk,
            query.project.pk,
            list(label_schema_scope(query.project, query.schema).ids),
            *where_params,
        ],
        _ROW_COLUMNS,
    )
    ids = np.unique(columns["group"])
    names = dict(User.objects.filter(pk__in=ids.tolist()).values_list("pk", "username"))
    columns["group"] = np.searchsorted(ids, columns["group"])
    usernames = [names.get(int(pk), str(pk)) for pk in ids]
    found = cm.slice_rows(
        _rows(columns), scale, [(name, name) for name in usernames], threshold=query.threshold
    )
    return sorted(found, key=lambda row: row.name)


# --- Between humans -------------------------------------------------------------------------


def human_agreement(
    project: Project,
    piece: Slice | None = None,
    *,
    scale: cm.Scale | None = None,
    schema: str = "",
) -> cm.HumanAgreement:
    """Agreement among the human annotators' submitted labels under one label schema
    (``schema``, by name; the project's one schema without a name) on the project's
    steps (in the slice), and of each with the adjudicated labels. Imported labels are
    not annotators. A ValueError names a schema the project lacks, or the ones to choose
    from."""
    scope = label_schema_scope(project, schema)
    where, where_params = slice_sql(piece)
    joins = (
        " JOIN trajectories_step s ON s.id = l.step_id"
        " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
        " WHERE t.project_id = %s AND l.schema_id = ANY(%s)" + where
    )
    with transaction.atomic():
        big_joins(project)
        labels = pull(
            "SELECT l.step_id::int8, l.annotator_id::int4, l.value::int4"
            " FROM labeling_steplabel l JOIN auth_user u ON u.id = l.annotator_id"
            + joins
            + " AND l.status = 'submitted' AND u.username NOT LIKE 'import:%%'",
            [project.pk, list(scope.ids), *where_params],
            [("step", "int8"), ("annotator", "int4"), ("value", "int4")],
        )
        finals = pull(
            "SELECT l.step_id::int8, l.value::int4 FROM labeling_finallabel l" + joins,
            [project.pk, list(scope.ids), *where_params],
            [("step", "int8"), ("value", "int4")],
        )
    ids = np.unique(labels["annotator"])
    names = dict(User.objects.filter(pk__in=ids.tolist()).values_list("pk", "username"))
    observed = np.unique(np.concatenate([labels["value"], finals["value"]])).tolist()
    if scale is None or not set(observed) <= set(scale.values):
        scale = scale_for(project, observed, schema=scope.name)
    agreement = cm.human_agreement(
        labels["step"],
        np.searchsorted(ids, labels["annotator"]).astype(np.int64),
        labels["value"].astype(np.float64),
        [names.get(int(pk), str(pk)) for pk in ids],
        scale,
        final_step=finals["step"],
        final_value=finals["value"].astype(np.float64),
    )
    return dataclasses.replace(agreement, schema=scope.name)
