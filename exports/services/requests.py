"""An export's request: its parameters as the command, the page and the API give them,
read into plain values (nothing is looked up here: :mod:`exports.services.plan` resolves
them), and stored on its job (``ExportJob`` columns and ``options``) and read back."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from exports.models import ExportJob
from exports.writers import ExportOptions
from labeling.sources import LabelSource, label_source_parse


@dataclass(frozen=True)
class ExportRequest:
    """Export parameters as asked (what the command, the page and the API share)."""

    format: str
    labels: LabelSource
    options: ExportOptions
    container: str = ""
    compress: bool = False
    selection_name: str = ""
    # The saved selection's definition as it was when the export was asked for.
    selection: dict[str, Any] = dataclasses.field(default_factory=dict)
    split: str = ""
    seed: int = 0
    scorer: str = ""  # a scorer whose step scores go along (dpo by score, rl rewards)
    credit_run: int | None = None  # an attribution run whose credits go along (rl, dpo)


def export_request_parse(
    *,
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
    """The parameters as an ExportRequest; ValueError (or TypeError, for an option that
    does not exist) says what is wrong. ``selection`` is the saved selection's name:
    its definition is the plan's to read."""
    return ExportRequest(
        format=format,
        labels=label_source_parse(labels, threshold=threshold, scorer=scorer),
        options=ExportOptions(neutral=neutral, **(options or {})),  # type: ignore[arg-type]
        container=container,
        compress=compress,
        selection_name=selection,
        split=split,
        seed=seed,
        scorer=scorer,
        credit_run=credit_run,
    )


def request_json(request: ExportRequest) -> dict[str, Any]:
    """What ``ExportJob.options`` keeps of the request (the rest has columns)."""
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
