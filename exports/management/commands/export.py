"""python manage.py export --project SLUG --format FORMAT --labels SOURCE --neutral MAP
--out DIR [--selection NAME] [--split train=0.9,test=0.1 --seed S] [--credit-run ID]
[--critiques JUDGE [--critique-rows all|agreeing]] [--decisive SOURCE] [...]"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from exports.services import export_plan_build, export_write
from exports.writers import FORMATS
from trajectories.models import Project


class Command(BaseCommand):
    help = (
        "Export training records (files and manifest.json) into a directory; prints a"
        " one-line JSON summary last."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True)
        parser.add_argument("--format", required=True, choices=sorted(FORMATS))
        parser.add_argument(
            "--labels",
            required=True,
            help="human:<user>, human:majority, human:adjudicated, import:<source>,"
            " model:<scorer>, consensus, mc[:<policy>][:hard|:soft]",
        )
        parser.add_argument(
            "--neutral",
            required=True,
            choices=["positive", "negative", "drop", "keep"],
            help="what a neutral (0) label becomes; never implicit",
        )
        parser.add_argument("--out", required=True, type=Path, help="directory to write into")
        parser.add_argument("--selection", default="", help="a saved selection's name")
        parser.add_argument("--split", default="", help="e.g. train=0.9,test=0.1")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--container", default="", choices=["", "jsonl", "json", "parquet"])
        parser.add_argument("--compress", action="store_true", help="gzip JSON output")
        parser.add_argument("--threshold", type=float, default=0.5, help="for model labels")
        parser.add_argument("--scorer", default="", help="scorer for scores / consensus")
        parser.add_argument(
            "--credit-run",
            type=int,
            default=None,
            metavar="ID",
            help="a finished attribution run whose credits fill rl's credit column"
            " (and dpo --pair-value credit)",
        )
        parser.add_argument("--min-margin", type=float, default=None, help="dpo pairs")
        parser.add_argument("--pair-value", choices=["label", "score", "credit"], default=None)
        parser.add_argument("--sft", choices=["success", "before_first_error"], default=None)
        parser.add_argument(
            "--stop-at-first-error",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="trl-stepwise and prm800k: end each trajectory's steps at its first error"
            " (the default)",
        )

        parser.add_argument(
            "--critiques",
            default=None,
            metavar="JUDGE",
            help="an llm-judge scorer whose critiques go beside trl-stepwise's labels"
            " (needed by --format critique)",
        )
        parser.add_argument(
            "--critique-rows",
            choices=["all", "agreeing"],
            default=None,
            help="critique: every parsed verdict, or only those that agree with the label",
        )
        parser.add_argument(
            "--decisive",
            default=None,
            metavar="SOURCE",
            help="human:<user>, import:<source> or model:<scorer>: whose decisive failure"
            " goes in each trajectory-level record (stepscope writes the label source's)",
        )
        parser.add_argument(
            "--rubric",
            default=None,
            metavar="SOURCE",
            help="human:<user>, human:majority or judge:<scorer>: whose rubric results (per"
            " criterion, and the score as rubric_reward) go in each trajectory-level record"
            " (trl-stepwise, prm800k; JSON lines); an annotator's episode verdicts go too",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"no project {options['project']!r}")
        extra = {
            key: options[name]
            for key, name in (
                ("min_margin", "min_margin"),
                ("pair_value", "pair_value"),
                ("sft", "sft"),
                ("stop_at_first_error", "stop_at_first_error"),
                ("critiques", "critiques"),
                ("critique_rows", "critique_rows"),
                ("decisive", "decisive"),
                ("rubric", "rubric"),
            )
            if options[name] is not None
        }
        try:
            plan = export_plan_build(
                project=project,
                format=options["format"],
                labels=options["labels"],
                neutral=options["neutral"],
                selection=options["selection"],
                split=options["split"],
                seed=options["seed"],
                container=options["container"],
                compress=options["compress"],
                threshold=options["threshold"],
                scorer=options["scorer"],
                credit_run=options["credit_run"],
                options=extra,
            )
            manifest = export_write(plan, out_dir=options["out"])
        except ValueError as error:
            raise CommandError(str(error)) from None
        files = manifest["files"]
        summary = {
            "format": manifest["format"],
            "out": str(options["out"]),
            "trajectories": manifest["counts"]["trajectories"],
            "steps": manifest["counts"]["steps"],
            "rows": sum(f["rows"] for f in files.values()),
            "files": {name: info["sha256"] for name, info in sorted(files.items())},
        }
        self.stdout.write(json.dumps(summary))
