"""Reads of the exports app: access helpers (404 for outsiders) and lists."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection
from django.db.models import Count, Exists, Max, OuterRef, Q
from django.http import Http404

from evaluation.kept import Kept, summary_kept
from exports.models import BatchVersion, ExportBatch, ExportJob, Selection
from labeling.models import StepLabel
from labeling.sources import (
    IMPORTED_PREFIX,
    label_schema_names,
    label_source_parse,
    label_source_sql,
)
from rollouts.changes import project_marks
from rollouts.models import Policy, StepMC
from scoring.models import AttributionRun, StepScore
from scoring.selectors import scorer_id_for, scorers_with_scores
from trajectories.models import Project
from trajectories.selection import selection_parse, selection_query
from trajectories.selectors import (
    AnyUser,
    projects_for_user,
    trajectories_filtered,
)


def export_job_get_for_user(user: AnyUser, pk: int) -> ExportJob:
    job = (
        ExportJob.objects.select_related("project")
        .filter(pk=pk, project__in=projects_for_user(user))
        .first()
    )
    if job is None:
        raise Http404("No such export.")
    return job


def selection_get_for_user(user: AnyUser, pk: int) -> Selection:
    selection = (
        Selection.objects.select_related("project")
        .filter(pk=pk, project__in=projects_for_user(user))
        .first()
    )
    if selection is None:
        raise Http404("No such selection.")
    return selection


def selections_for_project(project: Project) -> list[Selection]:
    """The project's saved selections, each with ``list_query``: the trajectory list's
    query string that opens it as the list (empty when its stored definition no longer
    parses)."""
    selections = list(
        Selection.objects.filter(project=project).select_related("created_by").order_by("name")
    )
    for selection in selections:
        try:
            query = selection_query(selection_parse(selection.definition))
        except ValueError:
            selection.list_query = ""  # type: ignore[attr-defined]
        else:
            selection.list_query = urlencode(query)  # type: ignore[attr-defined]
    return selections


# --- What the export form offers ----------------------------------------------------------


@dataclass(frozen=True)
class ExportChoices:
    """The export form's choices as ``(value, text)``, each text saying how much there is:
    the label sources with the steps each labels, the scorers with the steps each scored,
    the finished attribution runs with the steps each credited, and the selections with
    their trajectories."""

    label_sources: list[tuple[str, str]]
    scorers: list[tuple[str, str]]
    credit_runs: list[tuple[str, str]]
    selections: list[tuple[str, str]]
    # The humans' majority once it labels anything, else the first source that does (a
    # fresh import's truth), so the form opens on labels that exist.
    default_labels: str = "human:majority"
    # Where the counts stand (their age, whether a worker is counting them again); None
    # where nothing is counted (the preview's form).
    kept: Kept | None = None


def export_choices(project: Project, *, counted: bool = True) -> ExportChoices:
    """The export page's choices, each with how many steps it labels, scores or credits
    (a kept summary, :func:`choice_counts_make`: the kept counts while nothing they read
    has changed; else counted again here for a small project, by a worker for a large
    one, the page showing the kept counts with their age meanwhile), plus the selections,
    counted.

    ``counted=False`` is for the preview's form, which shows no choices and only checks
    the values given: it lists none of them and counts nothing (the form takes a value
    it does not list, and the service checks it, as for the API)."""
    if not counted:
        return ExportChoices(
            label_sources=list(FIXED_SOURCES), scorers=[], credit_runs=[], selections=[]
        )
    kept = summary_kept(project, CHOICES_PAGE, {})
    counts: ChoiceCounts | None = kept.value
    selections = selections_for_project(project)[:CHOICES_SHOWN]
    if counts is None:  # a large project's first counts: a worker is making them
        return ExportChoices(
            label_sources=list(FIXED_SOURCES),
            scorers=[],
            credit_runs=[],
            selections=[
                ("", "all trajectories"),
                *((selection.name, selection.name) for selection in selections),
            ],
            kept=kept,
        )
    labelling = [text for text, _, count in counts.labels if count]
    majority = counts.labels[0][0]  # the humans' majority (of the first schema)
    return ExportChoices(
        label_sources=[(text, f"{name} · {count:,} steps") for text, name, count in counts.labels],
        default_labels=majority if majority in labelling or not labelling else labelling[0],
        scorers=[(name, f"{name} · {count:,} steps scored") for name, count in counts.scored],
        credit_runs=[
            (str(pk), f"#{pk} {method} · {count:,} steps credited")
            for pk, method, count in counts.credited
        ],
        selections=[
            ("", f"all trajectories · {counts.trajectories:,}"),
            *(
                (
                    selection.name,
                    f"{selection.name} · {_selected(project, selection.definition):,} trajectories",
                )
                for selection in selections
            ),
        ],
        kept=kept,
    )


@dataclass(frozen=True)
class ChoiceCounts:
    """What the export page's choices say: each label source there is, as ``(text, name,
    steps it labels)``; each scorer with scores, as ``(name, steps scored)`` (its newest
    revision's); each finished attribution run, as ``(id, method, steps credited)``; and
    the project's trajectories."""

    labels: list[tuple[str, str, int]]
    scored: list[tuple[str, int]]
    credited: list[tuple[int, str, int]]
    trajectories: int


# The export page's counts, a kept summary of the project (evaluation.kept): made again in
# the request for a small project, and for a large one by a worker while the page shows
# the kept counts with their age; kept in the database, so every web process shares them.
CHOICES_PAGE = "export-choices"
# The scorers' counts, in the cache of the process that makes the summary (a worker's,
# for a large project) under this prefix, the project's id and its creation time.
SCORED_CACHE_PREFIX = "exports:scored-counts:"


def choice_counts_make(project: Project, params: Mapping[str, str]) -> ChoiceCounts:
    """The export page's choices and counts (the kept summary's making). Finding which
    members and imports label the project and counting each source, scorer and run is a
    pass over the project's labels, scores or credits: seconds on ten million steps."""
    return _choice_counts(project, _scored_kept(project))


def _scored_kept(project: Project) -> list[tuple[str, int]]:
    """The scores' counts (the costliest: 20 s of 25 at 10M steps) change only with the
    project's jobs, not with a label: a label write recounts the labels alone."""
    # The creation time too: a database rebuilt or restored may give another project the id.
    key = f"{SCORED_CACHE_PREFIX}{project.pk}:{project.created_at.timestamp()}"
    inputs = project_marks(project).inputs
    kept: dict[str, Any] | None = cache.get(key)
    if kept is not None and kept["inputs"] == inputs:
        scored: list[tuple[str, int]] = kept["scored"]
        return scored
    scored = _scored(project)
    cache.set(key, {"inputs": inputs, "scored": scored}, timeout=None)
    return scored


def _choice_counts(project: Project, scored: list[tuple[str, int]]) -> ChoiceCounts:
    known = {f"model:{name}": count for name, count in scored}
    labels = [
        (text, name, known[text] if text in known else _count(project, text))
        for text, name in _label_sources(project, [name for name, _ in scored])
    ]
    credited = list(
        AttributionRun.objects.filter(project=project, status=AttributionRun.Status.DONE)
        .exclude(method=AttributionRun.Method.TOKEN_SALIENCY)
        .annotate(credit_count=Count("credits"))
        .order_by("-pk")
        .values_list("pk", "method", "credit_count")[:CHOICES_SHOWN]
    )
    return ChoiceCounts(
        labels=labels,
        scored=scored,
        credited=credited,
        trajectories=project.trajectories.count(),
    )


# The label sources every project has.
FIXED_SOURCES = (
    ("human:majority", "humans: majority"),
    ("human:adjudicated", "humans: adjudicated"),
)
# At most this many members, imports, scorers, policies, runs and selections are offered;
# the form still takes any other name typed into the address (and the API, any at all).
CHOICES_SHOWN = 50


def _label_sources(project: Project, scored: list[str]) -> list[tuple[str, str]]:
    members = (
        User.objects.filter(memberships__project=project)
        .filter(
            Exists(
                StepLabel.objects.filter(
                    annotator=OuterRef("pk"),
                    status=StepLabel.Status.SUBMITTED,
                    schema__project=project,
                )
            )
        )
        .order_by("username")
        .values_list("username", flat=True)[:CHOICES_SHOWN]
    )
    imported = (
        User.objects.filter(username__startswith=IMPORTED_PREFIX)
        .filter(Exists(StepLabel.objects.filter(annotator=OuterRef("pk"), schema__project=project)))
        .order_by("username")
        .values_list("username", flat=True)[:CHOICES_SHOWN]
    )
    policies = (
        # Policies with Monte Carlo values in this project: a global policy valued only
        # in another project would be offered with 0 steps.
        Policy.objects.filter(
            Exists(StepMC.objects.filter(policy=OuterRef("pk"), step__trajectory__project=project))
        )
        .filter(Q(project=project) | Q(project__isnull=True))
        .order_by("name")
        .values_list("name", flat=True)[:CHOICES_SHOWN]
    )
    people = [
        *FIXED_SOURCES,
        *((f"human:{name}", f"annotator {name}") for name in members),
        *((name, f"imported: {name.removeprefix(IMPORTED_PREFIX)}") for name in imported),
    ]
    schemas = label_schema_names(project)
    if len(schemas) > 1:
        # People's labels are read one schema at a time where a project has several
        # (labeling.sources: an unnamed source there is refused).
        people = [
            (f"{text}/{schema}", f"{name} · {schema}")
            for text, name in people
            for schema in schemas
        ]
    return [
        *people,
        *((f"model:{name}", f"scorer {name} (thresholded)") for name in scored),
        *(
            (f"mc{suffix}", f"Monte Carlo{label}")
            for suffix, label in (
                [("", " (hard, newest of any policy)"), (":soft", " (soft, newest)")]
                if policies
                else []
            )
        ),
        *((f"mc:{name}", f"Monte Carlo of {name} (hard)") for name in policies),
    ]


def _count(project: Project, text: str) -> int:
    """How many steps of ``project`` the label source ``text`` labels (its own SQL)."""
    sql, params = label_source_sql(project, label_source_parse(text))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM ({sql}) labels", params)
        return int(cursor.fetchone()[0])


def _scored(project: Project) -> list[tuple[str, int]]:
    """Each scorer with scores in the project (its newest revision's), and how many."""
    scored = []
    for scorer in scorers_with_scores(project):
        count = StepScore.objects.filter(
            scorer_id=scorer_id_for(project, scorer.name), step__trajectory__project=project
        ).count()
        if count:
            scored.append((scorer.name, count))
    return scored[:CHOICES_SHOWN]


def _selected(project: Project, definition: dict[str, Any]) -> int:
    try:
        filters = selection_parse(definition)
    except ValueError:
        return 0
    return trajectories_filtered(project, filters).count()


# --- Versioned batches ----------------------------------------------------------------


def batch_get_for_user(user: AnyUser, slug: str, name: str) -> ExportBatch:
    """The batch ``name`` of project ``slug``; 404 outside the user's projects."""
    batch = (
        ExportBatch.objects.select_related("project")
        .filter(project__slug=slug, name=name, project__in=projects_for_user(user))
        .first()
    )
    if batch is None:
        raise Http404("No such batch.")
    return batch


def batches_for_project(project: Project) -> list[ExportBatch]:
    """The project's batches by name, each with ``version_count`` and ``latest`` (its
    newest version number, or None)."""
    return list(
        ExportBatch.objects.filter(project=project)
        .annotate(version_count=Count("versions"), latest=Max("versions__number"))
        .order_by("name")
    )


def batch_versions(batch: ExportBatch) -> list[BatchVersion]:
    """The batch's versions, newest first, with their exports."""
    return list(
        batch.versions.select_related("export", "export__created_by")
        .defer("export__manifest", "export__options")
        .order_by("-number")
    )


def batch_version_get(batch: ExportBatch, number: int | None) -> BatchVersion:
    """Version ``number`` of the batch (None: its newest); 404 where it has none."""
    versions = batch.versions.select_related("export", "batch", "batch__project")
    version = (
        versions.order_by("-number").first()
        if number is None
        else versions.filter(number=number).first()
    )
    if version is None:
        raise Http404(
            f"Batch {batch.name!r} has no versions yet."
            if number is None
            else f"Batch {batch.name!r} has no version {number}."
        )
    return version


def batch_ref_parse(text: str) -> tuple[str, int | None]:
    """``rl-batch@7`` as ``("rl-batch", 7)``; ``rl-batch`` and ``rl-batch@latest`` as
    ``("rl-batch", None)``, the newest version. ValueError for anything else."""
    name, _, number = text.partition("@")
    if not name or (number and number != "latest" and not number.isdigit()):
        raise ValueError(f"{text!r} is not a batch (name, name@7 or name@latest)")
    return name, int(number) if number.isdigit() else None


@dataclass(frozen=True)
class TrajectoryChange:
    trajectory_id: int
    external_id: str
    change: str  # added, removed, changed


@dataclass(frozen=True)
class LabelChange:
    trajectory_id: int
    external_id: str
    index: int
    before: Any  # None where the step had no label
    after: Any
    change: str  # added, removed, changed


@dataclass(frozen=True)
class BatchDiff:
    """What changed from version ``before`` to ``after``: trajectories added, removed and
    changed (content or outcome), and, on the trajectories in both, step labels added,
    removed and changed. ``counts`` are complete; the lists hold the first ``limit`` of
    each kind, by trajectory id and step."""

    before: BatchVersion
    after: BatchVersion
    counts: dict[str, dict[str, int]]
    trajectories: list[TrajectoryChange]
    labels: list[LabelChange]
    limit: int


_DIFF_ROWS = """
WITH a AS (SELECT * FROM exports_batchversionrow WHERE version_id = %s),
     b AS (SELECT * FROM exports_batchversionrow WHERE version_id = %s)
"""

_TRAJECTORY_CHANGES = (
    _DIFF_ROWS
    + """, d AS (
    SELECT coalesce(a.trajectory_id, b.trajectory_id) AS id,
           coalesce(b.external_id, a.external_id) AS external_id,
           CASE WHEN a.trajectory_id IS NULL THEN 'added'
                WHEN b.trajectory_id IS NULL THEN 'removed'
                ELSE 'changed' END AS change
    FROM a FULL JOIN b ON a.trajectory_id = b.trajectory_id
    WHERE a.trajectory_id IS NULL OR b.trajectory_id IS NULL
       OR a.content_digest <> b.content_digest
), ranked AS (
    SELECT *, row_number() OVER (PARTITION BY change ORDER BY id) AS n,
           count(*) OVER (PARTITION BY change) AS total
    FROM d
)
SELECT id, external_id, change, total, n FROM ranked WHERE n <= greatest(%s, 1)
ORDER BY change, id
"""
)

_LABEL_CHANGES = (
    _DIFF_ROWS
    + """, d AS (
    SELECT a.trajectory_id AS id, b.external_id, k.key::int AS index,
           a.labels -> k.key AS before, b.labels -> k.key AS after
    FROM a JOIN b ON a.trajectory_id = b.trajectory_id AND a.label_digest <> b.label_digest
    CROSS JOIN LATERAL (
        SELECT jsonb_object_keys(a.labels) AS key UNION SELECT jsonb_object_keys(b.labels)
    ) k
    WHERE (a.labels -> k.key) IS DISTINCT FROM (b.labels -> k.key)
), kinds AS (
    SELECT *, CASE WHEN before IS NULL THEN 'added' WHEN after IS NULL THEN 'removed'
                   ELSE 'changed' END AS change
    FROM d
), ranked AS (
    SELECT *, row_number() OVER (PARTITION BY change ORDER BY id, index) AS n,
           count(*) OVER (PARTITION BY change) AS total
    FROM kinds
)
SELECT id, external_id, index, before, after, change, total, n FROM ranked
WHERE n <= greatest(%s, 1)
ORDER BY id, index
"""
)

CHANGE_KINDS = ("added", "removed", "changed")


def batch_diff(before: BatchVersion, after: BatchVersion, *, limit: int = 200) -> BatchDiff:
    """The changes from ``before`` to ``after`` (two versions of one batch), from the
    rows each version keeps; no file is read."""
    counts = {
        "trajectories": dict.fromkeys(CHANGE_KINDS, 0),
        "labels": dict.fromkeys(CHANGE_KINDS, 0),
    }
    trajectories: list[TrajectoryChange] = []
    labels: list[LabelChange] = []
    with connection.cursor() as cursor:
        cursor.execute(_TRAJECTORY_CHANGES, [before.pk, after.pk, limit])
        # Each kind's first row comes even with ``limit`` 0: it carries the count.
        for pk, external_id, change, total, n in cursor.fetchall():
            counts["trajectories"][change] = total
            if n <= limit:
                trajectories.append(TrajectoryChange(pk, external_id, change))
        cursor.execute(_LABEL_CHANGES, [before.pk, after.pk, limit])
        for pk, external_id, index, was, now, change, total, n in cursor.fetchall():
            counts["labels"][change] = total
            if n <= limit:
                labels.append(LabelChange(pk, external_id, index, _json(was), _json(now), change))
    return BatchDiff(before, after, counts, trajectories, labels, limit)


def _json(raw: str | None) -> Any:
    """A jsonb value as Django's connection returns it (its text)."""
    return None if raw is None else json.loads(raw)
