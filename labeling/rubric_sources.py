"""Rubric sources: whose marks on a rubric stand in a comparison or an export. Each
resolves to SQL yielding ``(trajectory_id, rubric_id, criterion, mark, evidence)`` rows
for the rubric versions asked, one per trajectory and criterion it marks:

    rubric:human:<username>   one annotator's marks, on the trajectories they submitted
    rubric:human:majority     per criterion, the mark most annotators gave (submitted; a
                              tie gives none), its evidence the steps linked by more than
                              half of those who gave it
    rubric:judge:<scorer>     an LLM judge's marks (``scoring.models.JudgeRubricMark``)

Where only rubric sources are taken (the export's ``--rubric``) the ``rubric:`` prefix may
be left out. Each kind is registered with :func:`rubric_source_register`: ``human`` here,
``judge`` by scoring (its table), from its ``ready()``, with the names of its sources that
marked a rubric for the choices the pages offer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db import connection

from labeling.models import Rubric
from labeling.rubrics import rubric_score
from labeling.sources import IMPORTED_PREFIX
from trajectories.models import Project

PREFIX = "rubric:"
MAJORITY = "majority"


@dataclass(frozen=True)
class RubricSource:
    kind: str
    name: str

    def __str__(self) -> str:
        return f"{PREFIX}{self.text()}"

    def text(self) -> str:
        """The source as the export's ``--rubric`` spells it."""
        return f"{self.kind}:{self.name}"


# The SQL of a kind's rows for ``rubric_ids`` (all versions of one project's rubrics), and
# the names of its sources with marks on a rubric version, for the pages' choices.
RubricSql = Callable[[Project, Sequence[int], RubricSource], tuple[str, list[Any]]]
RubricNames = Callable[[Rubric], list[str]]


@dataclass(frozen=True)
class RubricKind:
    sql: RubricSql
    names: RubricNames


_KINDS: dict[str, RubricKind] = {}
KINDS = ("human", "judge")


def rubric_source_register(kind: str, *, names: RubricNames) -> Callable[[RubricSql], RubricSql]:
    """Decorate the SQL builder of rubric source ``kind`` (one of ``KINDS``)."""
    assert kind in KINDS, kind

    def register(build: RubricSql) -> RubricSql:
        _KINDS[kind] = RubricKind(build, names)
        return build

    return register


def rubric_source_parse(text: str) -> RubricSource:
    """``[rubric:]human:<user>``, ``[rubric:]human:majority`` or ``[rubric:]judge:<scorer>``;
    a ValueError names what is accepted."""
    spelled = text.strip()
    rest = spelled.removeprefix(PREFIX)
    kind, _, name = rest.partition(":")
    if kind not in KINDS or not name.strip():
        raise ValueError(
            f"unknown rubric source {spelled!r}; use rubric:human:<username>,"
            " rubric:human:majority or rubric:judge:<scorer>"
        )
    return RubricSource(kind, name.strip())


def rubric_source_sql(
    project: Project, rubric_ids: Sequence[int], source: RubricSource
) -> tuple[str, list[Any]]:
    """SQL of ``(trajectory_id, rubric_id, criterion, mark, evidence)`` on ``rubric_ids``
    (versions of ``project``'s rubrics); ValueError for an annotator or scorer that does
    not exist."""
    kind = _KINDS.get(source.kind)
    if kind is None:
        raise ValueError(f"rubric source {source.kind!r} is not available here")
    return kind.sql(project, list(rubric_ids), source)


def rubric_source_choices(rubric: Rubric) -> list[str]:
    """Every source with marks on ``rubric`` (this version): the annotators' majority
    first, then annotators, then judges."""
    out: list[str] = []
    for kind_name in KINDS:
        kind = _KINDS.get(kind_name)
        if kind is not None:
            out += [str(RubricSource(kind_name, name)) for name in kind.names(rubric)]
    return out


Marks = dict[int, dict[int, tuple[str, tuple[int, ...]]]]


def rubric_marks_read(rubric: Rubric, source: RubricSource) -> Marks:
    """``source``'s marks on ``rubric`` (this version): by trajectory id, by criterion,
    the mark and its evidence steps. One query."""
    sql, params = rubric_source_sql(rubric.project, [rubric.pk], source)
    marks: Marks = {}
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM ({sql}) r ORDER BY 1, 3", params)
        for trajectory_id, _, criterion, mark, evidence in cursor.fetchall():
            marks.setdefault(trajectory_id, {})[criterion] = (mark, tuple(evidence or ()))
    return marks


def rubric_kind_marks(
    rubric: Rubric, kind: str, trajectory_id: int
) -> list[tuple[str, dict[int, tuple[str, tuple[int, ...]]]]]:
    """The marks on ``rubric`` (this version) for one trajectory of each source of ``kind``
    (``judge``: each scorer) that marked it, by source name, then by criterion: the mark
    and its evidence steps. Sources with no mark on this trajectory are left out. Two
    queries and one a source (its SQL's lookups)."""
    registered = _KINDS.get(kind)
    if registered is None:
        return []
    parts: list[str] = []
    params: list[Any] = []
    for name in registered.names(rubric):
        sql, sql_params = rubric_source_sql(rubric.project, [rubric.pk], RubricSource(kind, name))
        parts.append(f"SELECT %s, r.* FROM ({sql}) r WHERE r.trajectory_id = %s")
        params += [name, *sql_params, trajectory_id]
    if not parts:
        return []
    found: dict[str, dict[int, tuple[str, tuple[int, ...]]]] = {}
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(parts) + " ORDER BY 1, 4", params)
        for name, _, _, criterion, mark, evidence in cursor.fetchall():
            found.setdefault(name, {})[criterion] = (mark, tuple(evidence or ()))
    return list(found.items())


def rubric_source_exports(
    project: Project, source: RubricSource, trajectory_ids: Sequence[int]
) -> dict[int, list[dict[str, Any]]]:
    """For exports: ``source``'s rubric results on ``trajectory_ids``, by trajectory id,
    in the shape of one annotator's (``labeling.selectors.rubrics.rubric_exports``):
    ``{"rubric", "version", "score", "criteria": [{"criterion", "mark", "evidence"}]}``,
    rubrics by name then version, criteria in rubric order. Two queries."""
    rubrics = {r.pk: r for r in Rubric.objects.filter(project=project)}
    sql, params = rubric_source_sql(project, list(rubrics), source)
    grouped: dict[tuple[int, int], list[tuple[int, str, list[int]]]] = {}
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT * FROM ({sql}) r WHERE r.trajectory_id = ANY(%s) ORDER BY 1, 2, 3",
            [*params, list(trajectory_ids)],
        )
        for trajectory_id, rubric_id, criterion, mark, evidence in cursor.fetchall():
            grouped.setdefault((trajectory_id, rubric_id), []).append(
                (criterion, mark, list(evidence or []))
            )
    results: dict[int, list[dict[str, Any]]] = {}
    ordered = sorted(
        grouped.items(),
        key=lambda item: (item[0][0], rubrics[item[0][1]].name, rubrics[item[0][1]].version),
    )
    for (trajectory_id, rubric_id), items in ordered:
        rubric = rubrics[rubric_id]
        results.setdefault(trajectory_id, []).append(
            {
                "rubric": rubric.name,
                "version": rubric.version,
                "score": rubric_score(rubric.criteria, {c: m for c, m, _ in items}),
                "criteria": [{"criterion": c, "mark": m, "evidence": e} for c, m, e in items],
            }
        )
    return results


# --- People's marks ----------------------------------------------------------------------------

# A person's marks count once they submitted the trajectory (as their exports do).
_SUBMITTED = (
    "EXISTS (SELECT 1 FROM labeling_trajectorylabel tl WHERE tl.trajectory_id = m.trajectory_id"
    " AND tl.annotator_id = m.annotator_id AND tl.status = 'submitted')"
)


def _annotator_names(rubric: Rubric) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT u.username FROM labeling_rubricmark m"
            " JOIN auth_user u ON u.id = m.annotator_id"
            f" WHERE m.rubric_id = %s AND {_SUBMITTED} AND u.username NOT LIKE %s ORDER BY 1",
            [rubric.pk, IMPORTED_PREFIX + "%"],
        )
        names = [row[0] for row in cursor.fetchall()]
    return [MAJORITY, *names] if len(names) > 1 else names


@rubric_source_register("human", names=_annotator_names)
def human_rubric_sql(
    project: Project, rubric_ids: Sequence[int], source: RubricSource
) -> tuple[str, list[Any]]:
    if source.name == MAJORITY:
        return _majority_sql(rubric_ids)
    if not User.objects.filter(username=source.name).exists():
        raise ValueError(f"no user named {source.name!r} (rubric source {source})")
    return (
        "SELECT m.trajectory_id, m.rubric_id, m.criterion, m.mark, m.evidence"
        " FROM labeling_rubricmark m JOIN auth_user u ON u.id = m.annotator_id"
        f" WHERE m.rubric_id = ANY(%s) AND u.username = %s AND {_SUBMITTED}",
        [list(rubric_ids), source.name],
    )


def _majority_sql(rubric_ids: Sequence[int]) -> tuple[str, list[Any]]:
    # Votes per (trajectory, rubric version, criterion, mark); the mark with strictly more
    # votes than any other wins; its evidence is each step linked by more than half of
    # the annotators who gave it.
    return (
        "WITH marks AS ("
        " SELECT m.trajectory_id, m.rubric_id, m.criterion, m.mark, m.evidence"
        " FROM labeling_rubricmark m JOIN auth_user u ON u.id = m.annotator_id"
        f" WHERE m.rubric_id = ANY(%s) AND u.username NOT LIKE %s AND {_SUBMITTED}),"
        " votes AS (SELECT trajectory_id, rubric_id, criterion, mark, count(*) AS n"
        " FROM marks GROUP BY 1, 2, 3, 4)"
        " SELECT v.trajectory_id, v.rubric_id, v.criterion, v.mark,"
        " ARRAY(SELECT e.step FROM marks k, unnest(k.evidence) AS e(step)"
        "  WHERE k.trajectory_id = v.trajectory_id AND k.rubric_id = v.rubric_id"
        "  AND k.criterion = v.criterion AND k.mark = v.mark"
        "  GROUP BY e.step HAVING 2 * count(*) > v.n ORDER BY e.step) AS evidence"
        " FROM votes v WHERE v.n > ALL (SELECT o.n FROM votes o"
        "  WHERE o.trajectory_id = v.trajectory_id AND o.rubric_id = v.rubric_id"
        "  AND o.criterion = v.criterion AND o.mark <> v.mark)",
        [list(rubric_ids), IMPORTED_PREFIX + "%"],
    )
