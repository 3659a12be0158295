"""Reads of the exports app: access helpers (404 for outsiders) and lists."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection
from django.db.models import Count, Exists, OuterRef, Q
from django.http import Http404

from exports.models import ExportJob, Selection
from labeling.models import StepLabel
from labeling.sources import (
    IMPORTED_PREFIX,
    label_schema_names,
    label_source_parse,
    label_source_sql,
)
from rollouts.changes import changed_since, project_marks
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


def export_choices(project: Project, *, counted: bool = True) -> ExportChoices:
    """The export page's choices, each with how many steps it labels, scores or credits
    (:func:`choice_counts`: counted once, then again only after the project's labels,
    scores, credits, members or trajectories change), plus the selections, counted.

    ``counted=False`` is for the preview's form, which shows no choices and only checks
    the values given: it lists none of them and counts nothing (the form takes a value
    it does not list, and the service checks it, as for the API)."""
    if not counted:
        return ExportChoices(
            label_sources=list(FIXED_SOURCES), scorers=[], credit_runs=[], selections=[]
        )
    counts = choice_counts(project)
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
                for selection in selections_for_project(project)[:CHOICES_SHOWN]
            ),
        ],
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


# The counts of a project, in Django's cache (each process's memory unless CACHES says
# otherwise) under this prefix, the project's id and its creation time.
COUNTS_CACHE_PREFIX = "exports:choice-counts:"


def choice_counts(project: Project) -> ChoiceCounts:
    """The export page's choices and counts. Finding which members and imports label the
    project and counting each source, scorer and run is a pass over the project's labels,
    scores or credits (seconds on a million labelled steps), so the result is kept in the
    cache and made again only when something it reads may have changed
    (:mod:`rollouts.changes`)."""
    # The creation time too: a database rebuilt or restored may give another project the id.
    key = f"{COUNTS_CACHE_PREFIX}{project.pk}:{project.created_at.timestamp()}"
    marks = project_marks(project)
    kept: dict[str, Any] | None = cache.get(key)
    if kept is not None and not changed_since(project, kept["marks"], marks):
        if kept["marks"] != marks:
            cache.set(key, {**kept, "marks": marks}, timeout=None)
        counts: ChoiceCounts = kept["counts"]
        return counts
    counts = _choice_counts(project)
    cache.set(key, {"marks": marks, "counts": counts}, timeout=None)
    return counts


def _choice_counts(project: Project) -> ChoiceCounts:
    scored = _scored(project)
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
