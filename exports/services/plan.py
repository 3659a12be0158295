"""An export's plan: everything an export resolves (its format and what the format
reads, the label source with its SQL, the selection's filters, the split, the ids of the
scorer, judge and attribution run it names, the decisive-failure source's SQL, the
revisions the manifest names), resolved once, when the export is asked for, and kept on
its job (``ExportJob.options["plan"]``) for the worker. Reading, writing, the preview and
the manifest read the plan; nothing after it looks a name up again.

The label source's SQL comes from :func:`labeling.sources.label_source_sql` here and
nowhere else in the app."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Any, cast

from django.contrib.auth.models import User
from django.db.models import QuerySet

from exports.models import ExportJob, Selection
from exports.services.requests import ExportRequest, export_request_parse, request_from_job
from exports.writers import ExportFormat, SplitSpec, export_format, parse_split_spec
from exports.writers.export import formats_reading
from exports.writers.output import Container
from labeling.decisive_sources import decisive_source_parse
from labeling.rubric_sources import MAJORITY, rubric_source_parse, rubric_source_sql
from labeling.sources import (
    LabelSource,
    label_source_annotator,
    label_source_annotators_sql,
    label_source_sql,
)
from scoring import prm
from scoring.models import AttributionRun, Scorer
from scoring.selectors import scorer_id_for
from trajectories import selectors
from trajectories.models import Project, Trajectory
from trajectories.selection import TrajectoryFilters, selection_parse

# SQL and its parameters.
Sql = tuple[str, list[Any]]

# The trajectories' decisive failures from the export's decisive-failure source (the
# last parameter, an id array): one annotator's submitted verdicts' (``human:<user>``,
# ``import:<source>``; the first parameter, a username), or a model's failure
# attributions (``model:<scorer>``; the first parameter, a scorer id). A verdict that
# names neither an agent nor a step has none.
DECISIVE_LABEL_SQL = (
    "SELECT tl.trajectory_id, tl.decisive_agent, tl.decisive_step, tl.decisive_reason"
    " FROM labeling_trajectorylabel tl JOIN auth_user u ON u.id = tl.annotator_id"
    " WHERE u.username = %s AND tl.status = 'submitted'"
    " AND (tl.decisive_agent <> '' OR tl.decisive_step IS NOT NULL)"
    " AND tl.trajectory_id = ANY(%s)"
)
DECISIVE_MODEL_SQL = (
    "SELECT v.trajectory_id, v.agent, v.step, v.reason FROM scoring_failureverdict v"
    " WHERE v.scorer_id = %s AND (v.agent <> '' OR v.step IS NOT NULL)"
    " AND v.trajectory_id = ANY(%s)"
)


@dataclass(frozen=True)
class ExportPlan:
    """An export resolved: what the reading code, the writers and the manifest need."""

    project: Project
    request: ExportRequest
    export: ExportFormat
    # What the format's records carry (``exports.writers.export.READS``): the export
    # reads only these.
    reads: frozenset[str]
    container: Container
    filters: TrajectoryFilters
    splits: SplitSpec | None
    # The label source's ``(step_id, value)`` rows: only the project's steps, and (for a
    # caller that joins them on its own steps) perhaps other projects' too, cheaper.
    labels_sql: Sql
    labels_sql_joined: Sql
    # ``(step_id, username)``: whose labels the source resolved (None: nobody's).
    annotators_sql: Sql | None
    scorer_id: int | None  # the scorer whose scores go along
    judge_id: int | None  # the LLM judge whose critiques go along
    # The decisive failures' SQL with its parameters but the trajectory id array.
    decisive_sql: Sql | None
    # The lossless format's: the annotator whose verdicts give each first error.
    first_errors_of: str | None
    # label_schema, scorers, attribution: as the manifest names them.
    revisions: dict[str, Any]

    @cached_property
    def chosen(self) -> QuerySet[Trajectory]:
        """The selected trajectories (built once per plan; each use clones it)."""
        return selectors.trajectories_filtered(self.project, self.filters)

    def to_json(self) -> dict[str, Any]:
        """What the job keeps (``ExportJob.options["plan"]``) beside the request."""
        return {
            "splits": None if self.splits is None else [list(p) for p in self.splits.parts],
            "labels_sql": list(self.labels_sql),
            "labels_sql_joined": list(self.labels_sql_joined),
            "annotators_sql": None if self.annotators_sql is None else list(self.annotators_sql),
            "scorer_id": self.scorer_id,
            "judge_id": self.judge_id,
            "decisive_sql": None if self.decisive_sql is None else list(self.decisive_sql),
            "first_errors_of": self.first_errors_of,
            "revisions": self.revisions,
        }


def export_plan_build(*, project: Project, format: str, **parameters: Any) -> ExportPlan:
    """The plan of an export of ``project`` asked for with ``parameters`` (those of
    :func:`exports.services.requests.export_request_parse`); every value is checked
    before anything is queued, and a ValueError says what is wrong."""
    export = export_format(format)  # an unknown format is said first
    request = export_request_parse(format=format, **parameters)
    if request.selection_name:
        saved = Selection.objects.filter(project=project, name=request.selection_name).first()
        if saved is None:
            raise ValueError(
                f"no selection named {request.selection_name!r} in project {project.slug!r}"
            )
        request = dataclasses.replace(request, selection=dict(saved.definition))
    return _resolve(project, request, export)


def export_plan_resolve(project: Project, request: ExportRequest) -> ExportPlan:
    """Resolve ``request`` for ``project``: each name looked up once."""
    return _resolve(project, request, export_format(request.format))


def _resolve(project: Project, request: ExportRequest, export: ExportFormat) -> ExportPlan:
    options = request.options
    splits = parse_split_spec(request.split) if request.split else None
    # A stored definition that no longer parses is an error now.
    filters = selection_parse(request.selection)
    if request.container and request.container not in export.containers:
        allowed = ", ".join(export.containers)
        raise ValueError(f"{request.format} can be written as {allowed}, not {request.container}")
    scorers = _Scorers(project)
    scorer_id = scorers.id(request.scorer) if request.scorer else None
    credit_run = None if request.credit_run is None else credit_run_for(project, request.credit_run)
    if credit_run is None and options.pair_value == "credit" and "pairs" in export.reads:
        raise ValueError("dpo pairs by credit need an attribution run (--credit-run)")
    # Names a missing annotator or scorer of the label source now, not later.
    labels_sql = label_source_sql(project, request.labels)
    labels_sql_joined = label_source_sql(project, request.labels, scoped=False)
    judge_id = _judge(scorers, export, options.critiques)
    _rubric_check(project, export, request)
    lossless = "annotators" in export.reads
    first_errors_of = label_source_annotator(request.labels) if lossless else None
    return ExportPlan(
        project=project,
        request=request,
        export=export,
        reads=export.reads,
        container=cast(Container, request.container or export.containers[0]),
        filters=filters,
        splits=splits,
        labels_sql=labels_sql,
        labels_sql_joined=labels_sql_joined,
        annotators_sql=label_source_annotators_sql(project, request.labels),
        scorer_id=scorer_id,
        judge_id=judge_id,
        decisive_sql=_decisive(scorers, export, request),
        first_errors_of=first_errors_of,
        revisions={
            "label_schema": _schema_revision(project, request.labels),
            "scorers": _scorer_revisions(scorers, request),
            "attribution": {} if credit_run is None else _attribution_revision(credit_run),
        },
    )


def export_plan_of(job: ExportJob) -> ExportPlan:
    """The plan kept on ``job``; a job queued before plans were kept is resolved now."""
    request = request_from_job(job)
    stored = job.options.get("plan")
    if stored is None:
        return export_plan_resolve(job.project, request)
    export = export_format(request.format)

    def sql(value: list[Any] | None) -> Sql | None:
        return None if value is None else (value[0], list(value[1]))

    splits = stored["splits"]
    return ExportPlan(
        project=job.project,
        request=request,
        export=export,
        reads=export.reads,
        container=cast(Container, request.container or export.containers[0]),
        filters=selection_parse(request.selection),
        splits=None if splits is None else SplitSpec(tuple((n, s) for n, s in splits)),
        labels_sql=cast(Sql, sql(stored["labels_sql"])),
        labels_sql_joined=cast(Sql, sql(stored["labels_sql_joined"])),
        annotators_sql=sql(stored["annotators_sql"]),
        scorer_id=stored["scorer_id"],
        judge_id=stored["judge_id"],
        decisive_sql=sql(stored["decisive_sql"]),
        first_errors_of=stored["first_errors_of"],
        revisions=stored["revisions"],
    )


class _Scorers:
    """The scorers an export names, each looked up once."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.found: dict[str, int] = {}

    def id(self, name: str) -> int:
        if name not in self.found:
            self.found[name] = scorer_id_for(self.project, name)
        return self.found[name]


def _judge(scorers: _Scorers, export: ExportFormat, judge: str) -> int | None:
    """The LLM judge of the project whose critiques a format that carries them names."""
    if not judge:
        if export.needs_critiques:
            raise ValueError(
                f"{export.name} rows are a judge's critiques; name the judge (critiques)"
            )
        return None
    if "critiques" not in export.reads:
        raise ValueError(
            f"critiques go beside the labels of trl-stepwise and make the critique format's"
            f" rows; {export.name} has no place for them"
        )
    scorer = Scorer.objects.get(pk=scorers.id(judge))
    if scorer.kind != prm.LLM_JUDGE:
        raise ValueError(f"critiques: scorer {judge!r} is a {scorer.kind}, not an llm-judge")
    return scorer.pk


def _decisive(scorers: _Scorers, export: ExportFormat, request: ExportRequest) -> Sql | None:
    """The SQL of the decisive failures the export writes: the ``decisive`` option's
    source (for a format with trajectory-level records), or for the lossless format the
    label source's own (one annotator, an import, a model); None for none."""
    text = request.options.decisive
    if text:
        if "decisive" not in export.reads:
            allowed = ", ".join(formats_reading("decisive"))
            raise ValueError(
                f"decisive: {export.name} has no record per trajectory to carry it;"
                f" it goes in {allowed}"
            )
        source = decisive_source_parse(text)
    elif "annotators" in export.reads and (
        request.labels.kind == "model" or label_source_annotator(request.labels) is not None
    ):
        source = request.labels
    else:
        return None
    if source.kind == "model":
        return DECISIVE_MODEL_SQL, [scorers.id(source.name)]
    username = label_source_annotator(source)
    if username is None:
        raise ValueError(f"{source} names no one whose decisive failures could be written")
    if text and not User.objects.filter(username=username).exists():
        raise ValueError(f"decisive: no annotator {username!r}")
    return DECISIVE_LABEL_SQL, [username]


def _rubric_check(project: Project, export: ExportFormat, request: ExportRequest) -> None:
    """The ``rubric`` option names a rubric source (``human:<user>``, ``human:majority``,
    ``judge:<scorer>``, ``rubric:`` in front or not) and a format whose JSON records carry
    it; the error names the option."""
    text = request.options.rubric
    if not text:
        return
    if "rubric" not in export.reads:
        allowed = ", ".join(formats_reading("rubric"))
        raise ValueError(
            f"rubric: {export.name} has no record per trajectory to carry it; it goes in {allowed}"
        )
    container = request.container or export.containers[0]
    if container not in ("jsonl", "json"):
        raise ValueError(f"rubric: written in jsonl or json records, not {container}")
    try:
        source = rubric_source_parse(text)
    except ValueError:
        raise ValueError(
            f"rubric: {text!r} is not human:<username>, human:majority or judge:<scorer>"
        ) from None
    if source.kind == "human" and source.name != MAJORITY:
        if not User.objects.filter(username=source.name).exists():
            raise ValueError(f"rubric: no annotator {source.name!r}")
        return
    try:
        rubric_source_sql(project, [], source)  # names a judge the project lacks, now
    except ValueError as error:
        raise ValueError(f"rubric: {error}") from None


def credit_run_for(project: Project, run_id: int) -> AttributionRun:
    """A finished attribution run of ``project`` that credits steps; ValueError otherwise."""
    run = AttributionRun.objects.filter(project=project, pk=run_id).first()
    if run is None:
        raise ValueError(f"no attribution run {run_id} in project {project.slug!r}")
    if run.method == AttributionRun.Method.TOKEN_SALIENCY:
        raise ValueError(f"attribution run {run_id} is token saliency; it credits no steps")
    if run.status != AttributionRun.Status.DONE:
        raise ValueError(
            f"attribution run {run_id} is {run.status}; only a finished run's credits export"
        )
    return run


def _schema_revision(project: Project, source: LabelSource) -> dict[str, Any] | None:
    """The label schema the source reads (the one it names, else the active one)."""
    schemas = project.label_schemas.filter(is_active=True)
    if source.schema:
        schemas = project.label_schemas.filter(name=source.schema)
    schema = schemas.order_by("-version").first()
    if schema is None:
        return None
    return {"name": schema.name, "version": schema.version, "kind": schema.kind}


def _scorer_revisions(scorers: _Scorers, request: ExportRequest) -> dict[str, Any]:
    """Each scorer the request names (scores, consensus, a model label source): its kind
    and model revision."""
    names = {n for n in (request.scorer, request.labels.scorer) if n}
    if request.labels.kind == "model":
        names.add(request.labels.name)
    ids = {name: scorers.id(name) for name in sorted(names)}
    found = {s.pk: s for s in Scorer.objects.filter(pk__in=ids.values())}
    return {
        name: {"kind": found[pk].kind, "revision": found[pk].revision} for name, pk in ids.items()
    }


def _attribution_revision(run: AttributionRun) -> dict[str, Any]:
    return {
        str(run.pk): {
            "method": run.method,
            "parameters": run.parameters,
            "scorer": run.scorer.name if run.scorer else None,
            "scorer_revision": run.scorer_revision,
            "label_source": run.label_source,
            "key": run.key,
        }
    }


__all__ = [
    "DECISIVE_LABEL_SQL",
    "DECISIVE_MODEL_SQL",
    "ExportPlan",
    "credit_run_for",
    "export_plan_build",
    "export_plan_of",
    "export_plan_resolve",
]
