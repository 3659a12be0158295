"""python manage.py compare --project SLUG --scorer NAME [--labels SOURCE] [--threshold T]
[--slice DIM=VALUE] [--by DIM] [--humans] [--json]"""

from __future__ import annotations

import json
import math
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from evaluation import compare
from trajectories.models import Project


def _number(value: float | None, digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.{digits}f}"


class Command(BaseCommand):
    help = (
        "Compare a scorer's step scores with a label source: confusion matrix, kappa,"
        " AUROC, calibration, ProcessBench first-error F1 and its threshold sweep, outcome"
        " against process. Prints a report and a one-line JSON summary last; with --json"
        " the last line is the whole result as one JSON object."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--scorer", required=True, help="scorer name")
        parser.add_argument(
            "--labels",
            default=compare.DEFAULT_LABELS,
            help="human:<user>, human:majority (default), human:adjudicated,"
            " import:<source>, model:<scorer> or consensus",
        )
        parser.add_argument(
            "--threshold",
            type=float,
            default=compare.DEFAULT_THRESHOLD,
            help="score at or above which the model says good (default 0.5)",
        )
        parser.add_argument(
            "--slice",
            default="",
            help="only part of the steps: "
            + ", ".join(f"{d}=VALUE" for d in compare.SLICE_DIMENSIONS),
        )
        parser.add_argument(
            "--by", default="", choices=["", *compare.SLICE_DIMENSIONS], help="break down by"
        )
        parser.add_argument("--humans", action="store_true", help="agreement among annotators")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"no project {options['project']!r}")
        try:
            query = compare.compare_query_build(
                project,
                scorer=options["scorer"],
                labels=options["labels"],
                threshold=options["threshold"],
                slice_text=options["slice"],
            )
        except ValueError as error:
            raise CommandError(str(error)) from None
        result = compare.compare_run(query, by=options["by"], humans=options["humans"])
        data = result.as_json()
        if options["json"]:
            self.stdout.write(json.dumps(data))
            return
        self._report(result)
        summary = {
            key: data[key] for key in ("project", "scorer", "labels", "steps", "kappa", "auroc")
        }
        summary["first_error"] = data["first_error"]
        self.stdout.write(json.dumps(summary))

    def _report(self, result: compare.CompareResult) -> None:
        out = self.stdout.write
        q, m, scale = result.query, result.metrics, result.scale
        where = f", slice {q.slice}" if q.slice else ""
        out(
            f"{q.scorer.name} against {q.reference} at threshold {q.threshold:g}{where}:"
            f" {m.steps} steps in {m.trajectories} trajectories ({result.seconds:.2f} s)"
        )
        width = max(len(name) for name in scale.names) + 2
        out("confusion (rows: reference, columns: model)")
        out(" " * width + "".join(f"{name:>{width}}" for name in scale.names))
        for name, row in zip(scale.names, m.confusion.tolist(), strict=True):
            out(f"{name:<{width}}" + "".join(f"{count:>{width}}" for count in row))
        quadratic = (
            f" (quadratic {_number(m.kappa_quadratic)})" if m.kappa_quadratic is not None else ""
        )
        out(f"kappa {_number(m.kappa)}{quadratic}, accuracy {_number(m.accuracy)}")
        d = m.detection
        out(
            f"bad steps: precision {_number(d.precision)}, recall {_number(d.recall)},"
            f" F1 {_number(d.f1)}"
        )
        ece = _number(m.reliability.ece) if m.reliability else "n/a"
        out(f"AUROC {_number(m.auroc)}, ECE {ece}")
        fe = m.first_error
        out(
            f"first error at {q.threshold:g}: with an error {_number(fe.acc_erroneous)}"
            f" ({fe.erroneous}), without {_number(fe.acc_correct)} ({fe.correct}),"
            f" F1 {_number(fe.f1)}"
        )
        if m.sweep is not None and m.sweep.best is not None:
            best = m.sweep.best
            out(f"best threshold {best.threshold:g}: F1 {_number(best.f1)}")
        if result.outcome is not None:
            o = result.outcome
            aurocs = ", ".join(f"{name} {_number(v)}" for name, v in o.auroc.items())
            out(f"outcome AUROC of the step scores' {aurocs} ({o.trajectories} trajectories)")
            lengths = ", ".join(f"{p.name}: {_number(p.mean, 2)}" for p in o.by_length)
            out(f"mean step score by trajectory length: {lengths}")
        if result.slices:
            out(f"by {result.by}:")
            for row in result.slices:
                out(
                    f"  {row.name}: {row.steps} steps, kappa {_number(row.kappa)},"
                    f" AUROC {_number(row.auroc)}, first-error F1 {_number(row.first_error_f1)}"
                )
        if result.humans is not None:
            h = result.humans
            out(
                f"between humans: agreement {_number(h.percent_agreement)},"
                f" alpha ({h.alpha_level}) {_number(h.alpha)} over {h.overlap_steps} steps"
            )
