"""Label sources: which labels stand as the reference in a comparison or an export.

    human:<username>    one annotator's submitted labels
    human:majority      the value most human annotators gave (a tie gives no label)
    human:adjudicated   a reviewer's final label
    import:<source>     labels that came with imported data, e.g. import:processbench
    model:<scorer>      a scorer's step scores, >= threshold good (+1), else bad (-1)
    consensus           human:majority where there is one, else model:<scorer>
    mc[:<policy>][:hard|:soft]
                        Monte Carlo values from rollouts (rollouts.models.StepMC): hard
                        (default: +1 when any continuation succeeded) or soft >= threshold;
                        one policy's, or each step's newest value of any policy

Each source resolves to SQL yielding ``(step_id, value)`` rows for one project, so
comparisons and exports can join it with steps and scores inside PostgreSQL instead of
loading labels into Python. The ``model`` and ``mc`` sources read scoring's and
rollouts' tables, so those apps register their SQL (``scoring/sources.py``,
``rollouts/sources.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User

from trajectories.models import Project

IMPORTED_PREFIX = "import:"
KINDS = ("human", "import", "model", "consensus", "mc")


@dataclass(frozen=True)
class LabelSource:
    kind: str
    name: str = ""
    threshold: float = 0.5
    scorer: str = ""  # for consensus: the model that fills in where humans did not label

    def __str__(self) -> str:
        if self.kind == "consensus":
            return f"consensus({self.scorer})"
        return f"{self.kind}:{self.name}"


# The SQL of a source whose labels live in a higher app's tables (a scorer's scores, Monte
# Carlo values): that app registers it for its kind from its AppConfig.ready() (scoring
# ``model``, rollouts ``mc``). It takes the project, the source and ``scoped`` (see
# label_source_sql), and raises ValueError for a scorer or policy that does not exist.
SourceSql = Callable[[Project, "LabelSource", bool], tuple[str, list[Any]]]
_KIND_SQL: dict[str, SourceSql] = {}


def label_source_register(kind: str) -> Callable[[SourceSql], SourceSql]:
    """Decorate the SQL builder of label source ``kind`` (one of ``KINDS``)."""
    assert kind in KINDS, kind

    def register(build: SourceSql) -> SourceSql:
        _KIND_SQL[kind] = build
        return build

    return register


def _registered(kind: str) -> SourceSql:
    build = _KIND_SQL.get(kind)
    if build is None:
        raise ValueError(f"label source {kind!r} is not available here")
    return build


def label_source_parse(text: str, *, threshold: float = 0.5, scorer: str = "") -> LabelSource:
    """Parse ``--labels``; a ValueError names what is wrong and what is accepted."""
    text = text.strip()
    if text == "consensus":
        if not scorer:
            raise ValueError("consensus needs a scorer to fill in where humans did not label")
        return LabelSource("consensus", threshold=threshold, scorer=scorer)
    kind, _, name = text.partition(":")
    if kind == "mc":
        # The name holds what follows "mc:" as written, so str() gives the text back.
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold {threshold} is outside 0..1")
        return LabelSource("mc", name, threshold=threshold)
    if kind not in KINDS or not name:
        raise ValueError(
            f"unknown label source {text!r}; use human:<username>, human:majority,"
            " human:adjudicated, import:<source>, model:<scorer>, consensus or"
            " mc[:<policy>][:hard|:soft]"
        )
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold {threshold} is outside 0..1")
    return LabelSource(kind, name, threshold=threshold)


def label_source_annotator(source: LabelSource) -> str | None:
    """The username of the one annotator whose labels ``source`` is (``human:<user>``,
    ``import:<source>``), or None for the sources that gather many or none."""
    if source.kind == "human" and source.name not in ("majority", "adjudicated"):
        return source.name
    if source.kind == "import":
        return IMPORTED_PREFIX + source.name
    return None


def label_source_sql(
    project: Project, source: LabelSource, *, scoped: bool = True
) -> tuple[str, list[Any]]:
    """SQL selecting ``(step_id, value)`` for every step of ``project`` that the source
    labels; raises ValueError when the named annotator or scorer does not exist.

    ``scoped=False`` is for a caller that joins the rows on its own steps of the project:
    the joins that keep other projects' steps out are left out where that saves a pass
    over the steps (their rows can never match), so the result may hold such rows."""
    project_steps = (
        " JOIN trajectories_step s ON s.id = {table}.step_id"
        " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
        " WHERE t.project_id = %s AND "
    )
    if source.kind == "human" and source.name == "majority":
        return _majority_sql(project)
    if source.kind == "human" and source.name == "adjudicated":
        if not scoped:
            return "SELECT f.step_id, f.value FROM labeling_finallabel f", []
        return (
            "SELECT f.step_id, f.value FROM labeling_finallabel f"
            + project_steps.format(table="f").removesuffix(" AND "),
            [project.pk],
        )
    if source.kind in ("human", "import"):
        username = source.name if source.kind == "human" else IMPORTED_PREFIX + source.name
        if source.kind == "human" and username.startswith(IMPORTED_PREFIX):
            raise ValueError(f"{username!r} is an import source; use {username}")
        # A misspelt annotator would read as one who labelled nothing. (An import
        # source may be named before its labels arrive: jobs wait for them.)
        if source.kind == "human" and not User.objects.filter(username=username).exists():
            raise ValueError(f"no user named {username!r} (label source human:{username})")
        select = (
            "SELECT l.step_id, l.value FROM labeling_steplabel l"
            " JOIN auth_user u ON u.id = l.annotator_id"
        )
        where = "u.username = %s AND l.status = 'submitted'"
        if not scoped:
            return f"{select} WHERE {where}", [username]
        return f"{select}{project_steps.format(table='l')}{where}", [project.pk, username]
    if source.kind in ("model", "mc"):
        return _registered(source.kind)(project, source, scoped)
    majority, majority_params = _majority_sql(project)
    model, model_params = _registered("model")(
        project, LabelSource("model", source.scorer, threshold=source.threshold), scoped
    )
    return (
        f"SELECT COALESCE(h.step_id, m.step_id) AS step_id, COALESCE(h.value, m.value) AS value"
        f" FROM ({majority}) h FULL OUTER JOIN ({model}) m ON m.step_id = h.step_id",
        [*majority_params, *model_params],
    )


def label_source_annotators_sql(
    project: Project, source: LabelSource
) -> tuple[str, list[Any]] | None:
    """SQL selecting ``(step_id, username)``: whose labels ``source`` resolved on each
    step of ``project`` it labels (the one annotator or import; every human who voted
    on a step with a majority, the humans of ``consensus`` too; the reviewer of an
    adjudicated label). None for the sources no person labels (``model``, ``mc``)."""
    if source.kind in ("model", "mc"):
        return None
    if source.kind == "human" and source.name == "adjudicated":
        return (
            "SELECT f.step_id, u.username FROM labeling_finallabel f"
            " JOIN auth_user u ON u.id = f.adjudicator_id"
            " JOIN trajectories_step s ON s.id = f.step_id"
            " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
            " WHERE t.project_id = %s",
            [project.pk],
        )
    one = label_source_annotator(source)
    if one is not None:
        return (
            "SELECT l.step_id, u.username FROM labeling_steplabel l"
            " JOIN auth_user u ON u.id = l.annotator_id"
            " JOIN trajectories_step s ON s.id = l.step_id"
            " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
            " WHERE t.project_id = %s AND u.username = %s AND l.status = 'submitted'",
            [project.pk, one],
        )
    # The votes StepMajority counts (migration 0003): people's submitted labels.
    return (
        "SELECT l.step_id, u.username FROM labeling_stepmajority m"
        " JOIN labeling_steplabel l ON l.step_id = m.step_id"
        " JOIN auth_user u ON u.id = l.annotator_id"
        " WHERE m.project_id = %s AND m.value IS NOT NULL AND l.status = 'submitted'"
        " AND u.username NOT LIKE %s",
        [project.pk, IMPORTED_PREFIX + "%"],
    )


def _majority_sql(project: Project) -> tuple[str, list[Any]]:
    # Kept per step by triggers on the step labels (labeling.models.StepMajority): the
    # value with the strictly highest count among human annotators' submitted labels,
    # NULL on a tie. Reading it is an index scan in step order, where counting the votes
    # here cost a second of CPU per million labels (bench/compare.py).
    return (
        "SELECT m.step_id, m.value FROM labeling_stepmajority m"
        " WHERE m.project_id = %s AND m.value IS NOT NULL",
        [project.pk],
    )
