"""An export's request: its parameters checked before anything is queued, and stored on
its job (``ExportJob.options``) and read back by the worker."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User

from exports.models import ExportJob, Selection
from exports.writers import (
    ExportOptions,
    parse_split_spec,
)
from exports.writers.export import CRITIQUE_OUTPUTS, DECISIVE_OUTPUTS, export_format
from labeling.decisive_sources import decisive_source_parse
from labeling.sources import (
    LabelSource,
    label_source_annotator,
    label_source_parse,
    label_source_sql,
)
from scoring import prm
from scoring.models import AttributionRun, Scorer
from scoring.selectors import scorer_id_for
from trajectories.models import Project
from trajectories.selection import TrajectoryFilters, selection_parse


@dataclass(frozen=True)
class ExportRequest:
    """Validated export parameters (what the command, the page and the API share)."""

    format: str
    labels: LabelSource
    options: ExportOptions
    container: str = ""
    compress: bool = False
    selection_name: str = ""
    selection: dict[str, Any] = dataclasses.field(default_factory=dict)
    split: str = ""
    seed: int = 0
    scorer: str = ""  # a scorer whose step scores go along (dpo by score, rl rewards)
    credit_run: int | None = None  # an attribution run whose credits go along (rl, dpo)


def export_request_build(
    *,
    project: Project,
    format: str,
    labels: str,
    neutral: str,
    selection: str = "",
    split: str = "",
    seed: int = 0,
    container: str = "",
    compress: bool = False,
    threshold: float = 0.5,
    scorer: str = "",
    credit_run: int | None = None,
    options: dict[str, Any] | None = None,
) -> ExportRequest:
    """Check every parameter before anything is queued; ValueError says what is wrong."""
    export = export_format(format)
    source = label_source_parse(labels, threshold=threshold, scorer=scorer)
    export_options = ExportOptions(neutral=neutral, **(options or {}))  # type: ignore[arg-type]
    if split:
        parse_split_spec(split)
    definition: dict[str, Any] = {}
    if selection:
        saved = Selection.objects.filter(project=project, name=selection).first()
        if saved is None:
            raise ValueError(f"no selection named {selection!r} in project {project.slug!r}")
        definition = dict(saved.definition)
        request_filters(definition)  # a stored definition that no longer parses is an error now
    if container and container not in export.containers:
        allowed = ", ".join(export.containers)
        raise ValueError(f"{format} can be written as {allowed}, not {container}")
    if scorer:
        scorer_id_for(project, scorer)
    if credit_run is not None:
        credit_run_for(project, credit_run)
    elif export_options.pair_value == "credit" and format == "dpo":
        raise ValueError("dpo pairs by credit need an attribution run (--credit-run)")
    label_source_sql(project, source)  # names a missing annotator's scorer now, not later
    _check_critiques(project, format, export_options.critiques)
    _check_decisive(project, format, export_options.decisive)
    return ExportRequest(
        format=format,
        labels=source,
        options=export_options,
        container=container,
        compress=compress,
        selection_name=selection,
        selection=definition,
        split=split,
        seed=seed,
        scorer=scorer,
        credit_run=credit_run,
    )


def _check_critiques(project: Project, format: str, judge: str) -> None:
    """A format that carries critiques names a judge, and the judge is an LLM judge of
    the project."""
    if not judge:
        if export_format(format).needs_critiques:
            raise ValueError(f"{format} rows are a judge's critiques; name the judge (critiques)")
        return
    if format not in ("critique", *CRITIQUE_OUTPUTS):
        raise ValueError(
            f"critiques go beside the labels of trl-stepwise and make the critique format's"
            f" rows; {format} has no place for them"
        )
    scorer = Scorer.objects.get(pk=scorer_id_for(project, judge))
    if scorer.kind != prm.LLM_JUDGE:
        raise ValueError(f"critiques: scorer {judge!r} is a {scorer.kind}, not an llm-judge")


def _check_decisive(project: Project, format: str, text: str) -> None:
    """A decisive-failure source that exists, for a format with trajectory-level records."""
    if not text:
        return
    if format not in ("stepscope", *DECISIVE_OUTPUTS):
        allowed = ", ".join(("stepscope", *DECISIVE_OUTPUTS))
        raise ValueError(
            f"decisive: {format} has no record per trajectory to carry it; it goes in {allowed}"
        )
    source = decisive_source_parse(text)
    if source.kind == "model":
        scorer_id_for(project, source.name)
        return
    username = label_source_annotator(source)
    if not User.objects.filter(username=username).exists():
        raise ValueError(f"decisive: no annotator {username!r}")


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


def request_filters(definition: dict[str, Any]) -> TrajectoryFilters:
    """A saved selection's stored definition, read by the one selection parser (old
    names included)."""
    return selection_parse(definition)


def request_json(request: ExportRequest) -> dict[str, Any]:
    options = dataclasses.asdict(request.options)
    options.pop("neutral")
    return {
        "options": options,
        "labels": {
            "text": _label_text(request.labels),
            "threshold": request.labels.threshold,
            "scorer": request.labels.scorer,
        },
        "scorer": request.scorer,
        "credit_run": request.credit_run,
    }


def _label_text(source: LabelSource) -> str:
    return "consensus" if source.kind == "consensus" else f"{source.kind}:{source.name}"


def request_from_job(job: ExportJob) -> ExportRequest:
    stored = job.options
    labels = stored["labels"]
    return ExportRequest(
        format=job.format,
        labels=label_source_parse(
            labels["text"], threshold=labels["threshold"], scorer=labels["scorer"]
        ),
        options=ExportOptions(neutral=job.neutral, **stored["options"]),  # type: ignore[arg-type]
        container=job.container,
        compress=job.compress,
        selection_name=job.selection_name,
        selection=job.selection,
        split=job.split,
        seed=job.seed,
        scorer=stored.get("scorer", ""),
        credit_run=stored.get("credit_run"),
    )
