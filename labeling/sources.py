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

A source of people's labels reads one label schema (the label's dimension: correctness,
error type, severity, ...), named after a slash: ``human:majority/severity``,
``human:ann/correctness``, ``import:processbench/step quality``, ``consensus/correctness``.
Without a name it reads the project's one schema, so a project with a single schema
spells its sources as it always did; a project with several must name one (a ValueError
lists them). ``human:majority`` of one schema never counts another's labels. Model and
Monte Carlo sources have no schema.

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
from django.db.models import Subquery

from labeling.models import LabelSchema
from trajectories.models import Project

IMPORTED_PREFIX = "import:"
KINDS = ("human", "import", "model", "consensus", "mc")
# The kinds whose labels people give under a schema, and the separator of its name.
SCHEMA_KINDS = ("human", "import", "consensus")
SCHEMA_SEPARATOR = "/"


@dataclass(frozen=True)
class LabelSource:
    kind: str
    name: str = ""
    threshold: float = 0.5
    scorer: str = ""  # for consensus: the model that fills in where humans did not label
    # The label schema's name; empty: the project's one schema (label_schema_scope).
    schema: str = ""

    def __str__(self) -> str:
        named = f"{SCHEMA_SEPARATOR}{self.schema}" if self.schema else ""
        if self.kind == "consensus":
            return f"consensus{named}({self.scorer})"
        return f"{self.kind}:{self.name}{named}"

    def text(self) -> str:
        """The source as ``--labels``, the pages and the API spell it."""
        named = f"{SCHEMA_SEPARATOR}{self.schema}" if self.schema else ""
        if self.kind == "consensus":
            return f"consensus{named}"
        return f"{self.kind}:{self.name}{named}"


@dataclass(frozen=True)
class SchemaScope:
    """The label schema a source reads: its name and the ids of all its versions (an
    annotator's label under any version counts; the triggers of migration 0006 keep one
    of them counted per step)."""

    name: str
    ids: tuple[int, ...]


def label_schema_names(project: Project) -> list[str]:
    """The names of the project's label schemas that have an active version, in order."""
    return sorted(
        set(
            LabelSchema.objects.filter(project=project, is_active=True).values_list(
                "name", flat=True
            )
        )
    )


def label_schema_first(project: Project) -> LabelSchema | None:
    """The newest active version of the project's first schema (the first made): what a
    view that shows one dimension alone (the list's first-error column) shows."""
    active = LabelSchema.objects.filter(project=project, is_active=True)
    first = active.order_by("id").values("name")[:1]
    return active.filter(name=Subquery(first)).order_by("-version", "-id").first()


def label_schema_scope(project: Project, name: str | None = None) -> SchemaScope:
    """The schema ``name`` of ``project`` (any of its versions), or with no name the
    project's one schema: the one with an active version, or failing that the one it
    ever had. A ValueError names a schema the project lacks, or the schemas to choose
    from when there are several. A project with no schema yet has an empty scope (no
    label can be under it)."""
    rows = list(
        LabelSchema.objects.filter(project=project)
        .order_by("name", "id")
        .values_list("name", "id", "is_active")
    )
    ids: dict[str, list[int]] = {}
    active: set[str] = set()
    for schema_name, schema_id, is_active in rows:
        ids.setdefault(schema_name, []).append(schema_id)
        if is_active:
            active.add(schema_name)
    if name:
        if name not in ids:
            known = ", ".join(repr(n) for n in sorted(ids)) or "none"
            raise ValueError(
                f"project {project.slug!r} has no label schema named {name!r}"
                f" (its schemas: {known})"
            )
        return SchemaScope(name, tuple(ids[name]))
    candidates = sorted(active) or sorted(ids)
    if not candidates:
        return SchemaScope("", ())
    if len(candidates) > 1:
        listed = ", ".join(repr(n) for n in candidates)
        raise ValueError(
            f"project {project.slug!r} labels under several schemas ({listed});"
            f" name one after a slash, e.g. human:majority{SCHEMA_SEPARATOR}{candidates[0]}"
        )
    return SchemaScope(candidates[0], tuple(ids[candidates[0]]))


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
    schema = ""
    head = text.partition(":")[0].partition(SCHEMA_SEPARATOR)[0]
    if head in SCHEMA_KINDS and SCHEMA_SEPARATOR in text:
        # Usernames hold no slash, so the schema is what follows the first one after the
        # kind (a schema's own name may hold one).
        prefix, _, schema = text.partition(SCHEMA_SEPARATOR)
        if head == "consensus" or ":" in prefix:
            text, schema = prefix, schema.strip()
            if not schema:
                raise ValueError(f"{text}{SCHEMA_SEPARATOR} names no label schema")
        else:
            schema = ""
    if text == "consensus":
        if not scorer:
            raise ValueError("consensus needs a scorer to fill in where humans did not label")
        return LabelSource("consensus", threshold=threshold, scorer=scorer, schema=schema)
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
            " mc[:<policy>][:hard|:soft], the people's ones with /<schema> where the"
            " project has several label schemas"
        )
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold {threshold} is outside 0..1")
    return LabelSource(kind, name, threshold=threshold, schema=schema)


def label_source_annotator(source: LabelSource) -> str | None:
    """The username of the one annotator whose labels ``source`` is (``human:<user>``,
    ``import:<source>``), or None for the sources that gather many or none."""
    if source.kind == "human" and source.name not in ("majority", "adjudicated"):
        return source.name
    if source.kind == "import":
        return IMPORTED_PREFIX + source.name
    return None


def label_source_sql(
    project: Project, source: LabelSource, *, scoped: bool = True, schema: str | None = None
) -> tuple[str, list[Any]]:
    """SQL selecting ``(step_id, value)`` for every step of ``project`` that the source
    labels; raises ValueError when the named annotator, scorer or label schema does not
    exist, or when the project has several schemas and neither ``schema`` nor the
    source names one.

    ``schema`` (a schema's name) overrides the source's own; people's labels are read
    under that schema alone (model and Monte Carlo sources have none).

    ``scoped=False`` is for a caller that joins the rows on its own steps of the project:
    the joins that keep other projects' steps out are left out where that saves a pass
    over the steps (their rows can never match), so the result may hold such rows.
    People's labels need no such join either way: the schema's ids are the project's."""
    if source.kind in ("model", "mc"):
        return _registered(source.kind)(project, source, scoped)
    scope = label_schema_scope(project, schema or source.schema)
    ids = list(scope.ids)
    if source.kind == "human" and source.name == "majority":
        return _majority_sql(project, scope)
    if source.kind == "human" and source.name == "adjudicated":
        # The schema's ids are the project's own, so they keep other projects out.
        return (
            "SELECT f.step_id, f.value FROM labeling_finallabel f WHERE f.schema_id = ANY(%s)",
            [ids],
        )
    if source.kind in ("human", "import"):
        username = source.name if source.kind == "human" else IMPORTED_PREFIX + source.name
        if source.kind == "human" and username.startswith(IMPORTED_PREFIX):
            raise ValueError(f"{username!r} is an import source; use {username}")
        # A misspelt annotator would read as one who labelled nothing. (An import
        # source may be named before its labels arrive: jobs wait for them.)
        if source.kind == "human" and not User.objects.filter(username=username).exists():
            raise ValueError(f"no user named {username!r} (label source human:{username})")
        # The (annotator, schema) index finds the labels; the schema's ids are the
        # project's own, so no join on the steps is needed to keep other projects out.
        return (
            "SELECT l.step_id, l.value FROM labeling_steplabel l"
            " WHERE l.annotator_id = (SELECT u.id FROM auth_user u WHERE u.username = %s)"
            " AND l.schema_id = ANY(%s) AND l.status = 'submitted'",
            [username, ids],
        )
    majority, majority_params = _majority_sql(project, scope)
    model, model_params = _registered("model")(
        project, LabelSource("model", source.scorer, threshold=source.threshold), scoped
    )
    return (
        f"SELECT COALESCE(h.step_id, m.step_id) AS step_id, COALESCE(h.value, m.value) AS value"
        f" FROM ({majority}) h FULL OUTER JOIN ({model}) m ON m.step_id = h.step_id",
        [*majority_params, *model_params],
    )


def label_source_annotators_sql(
    project: Project, source: LabelSource, *, schema: str | None = None
) -> tuple[str, list[Any]] | None:
    """SQL selecting ``(step_id, username)``: whose labels ``source`` resolved on each
    step of ``project`` it labels (the one annotator or import; every human who voted
    on a step with a majority, the humans of ``consensus`` too; the reviewer of an
    adjudicated label), under the source's schema (or ``schema``). None for the sources
    no person labels (``model``, ``mc``)."""
    if source.kind in ("model", "mc"):
        return None
    scope = label_schema_scope(project, schema or source.schema)
    ids = list(scope.ids)
    if source.kind == "human" and source.name == "adjudicated":
        return (
            "SELECT f.step_id, u.username FROM labeling_finallabel f"
            " JOIN auth_user u ON u.id = f.adjudicator_id WHERE f.schema_id = ANY(%s)",
            [ids],
        )
    one = label_source_annotator(source)
    if one is not None:
        return (
            "SELECT l.step_id, u.username FROM labeling_steplabel l"
            " JOIN auth_user u ON u.id = l.annotator_id"
            " WHERE u.username = %s AND l.schema_id = ANY(%s) AND l.status = 'submitted'",
            [one, ids],
        )
    # The votes StepMajority counts (migration 0008): people's submitted labels under
    # the schema's versions.
    return (
        "SELECT l.step_id, u.username FROM labeling_stepmajority m"
        " JOIN labeling_steplabel l ON l.step_id = m.step_id AND l.schema_id = ANY(%s)"
        " JOIN auth_user u ON u.id = l.annotator_id"
        " WHERE m.project_id = %s AND m.schema_name = %s AND m.value IS NOT NULL"
        " AND l.status = 'submitted' AND u.username NOT LIKE %s",
        [ids, project.pk, scope.name, IMPORTED_PREFIX + "%"],
    )


def _majority_sql(project: Project, scope: SchemaScope) -> tuple[str, list[Any]]:
    # Kept per step and schema name by triggers on the step labels
    # (labeling.models.StepMajority): the value with the strictly highest count among
    # human annotators' submitted labels under the schema, NULL on a tie. Reading it is
    # an index scan in step order, where counting the votes here cost a second of CPU
    # per million labels (bench/compare.py).
    return (
        "SELECT m.step_id, m.value FROM labeling_stepmajority m"
        " WHERE m.project_id = %s AND m.schema_name = %s AND m.value IS NOT NULL",
        [project.pk, scope.name],
    )
