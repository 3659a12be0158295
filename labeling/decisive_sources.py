"""Decisive-failure sources: whose "which agent, at which step, decided the failure"
stands in a comparison (the Who&When task). Each resolves to SQL yielding
``(trajectory_id, agent, step)`` rows for one project, one per trajectory it judges
(``agent`` ``''`` and ``step`` NULL where it names none):

    human:<username>    one annotator's submitted verdicts' decisive failure
    import:<source>     the decisive failures that came with imported data
    model:<scorer>      a model's failure attributions (scoring.models.FailureVerdict)

The ``model`` kind reads scoring's table, so scoring registers it
(``decisive_source_register``, from its ``ready()``), with the list of scorers that have
verdicts in a project for the compare page's choices.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection

from labeling.sources import IMPORTED_PREFIX, LabelSource, label_source_parse
from trajectories.models import Project

DecisiveSql = Callable[[Project, LabelSource], tuple[str, list[Any]]]
DecisiveNames = Callable[[Project], list[str]]


@dataclass(frozen=True)
class DecisiveKind:
    sql: DecisiveSql
    # The names of this kind's sources that judge some trajectory of a project.
    names: DecisiveNames


_KINDS: dict[str, DecisiveKind] = {}


def decisive_source_register(
    kind: str, *, names: DecisiveNames
) -> Callable[[DecisiveSql], DecisiveSql]:
    assert kind == "model", kind

    def register(build: DecisiveSql) -> DecisiveSql:
        _KINDS[kind] = DecisiveKind(build, names)
        return build

    return register


def decisive_source_parse(text: str) -> LabelSource:
    """``human:<user>``, ``import:<source>`` or ``model:<scorer>``; a ValueError names
    what is accepted."""
    try:
        source = label_source_parse(text)
    except ValueError:
        source = None
    if (
        source is None
        or source.kind not in ("human", "import", "model")
        or (source.kind == "human" and source.name in ("majority", "adjudicated"))
    ):
        raise ValueError(
            f"unknown decisive-failure source {text.strip()!r}; use human:<username>,"
            " import:<source> or model:<scorer>"
        )
    return source


_JUDGED = "(tl.decisive_agent <> '' OR tl.decisive_step IS NOT NULL)"


def decisive_source_sql(project: Project, source: LabelSource) -> tuple[str, list[Any]]:
    """SQL of ``(trajectory_id, agent, step)``; ValueError for a scorer that does not
    exist."""
    if source.kind == "model":
        kind = _KINDS.get("model")
        if kind is None:
            raise ValueError("decisive-failure source 'model' is not available here")
        return kind.sql(project, source)
    username = source.name if source.kind == "human" else IMPORTED_PREFIX + source.name
    if source.kind == "human" and username.startswith(IMPORTED_PREFIX):
        raise ValueError(f"{username!r} is an import source; use {username}")
    return (
        "SELECT tl.trajectory_id, tl.decisive_agent AS agent, tl.decisive_step AS step"
        " FROM labeling_trajectorylabel tl"
        " JOIN auth_user u ON u.id = tl.annotator_id"
        " JOIN trajectories_trajectory t ON t.id = tl.trajectory_id"
        f" WHERE t.project_id = %s AND u.username = %s AND tl.status = 'submitted' AND {_JUDGED}",
        [project.pk, username],
    )


def decisive_source_choices(project: Project) -> list[str]:
    """Every source with a decisive failure on some trajectory of ``project``: imports,
    annotators, then models."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT u.username FROM labeling_trajectorylabel tl"
            " JOIN auth_user u ON u.id = tl.annotator_id"
            " JOIN trajectories_trajectory t ON t.id = tl.trajectory_id"
            f" WHERE t.project_id = %s AND tl.status = 'submitted' AND {_JUDGED}"
            " ORDER BY 1",
            [project.pk],
        )
        usernames = [row[0] for row in cursor.fetchall()]
    imports = [name for name in usernames if name.startswith(IMPORTED_PREFIX)]
    humans = [f"human:{name}" for name in usernames if not name.startswith(IMPORTED_PREFIX)]
    kind = _KINDS.get("model")
    models = [f"model:{name}" for name in kind.names(project)] if kind else []
    return [*imports, *humans, *models]
