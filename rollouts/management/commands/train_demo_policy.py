"""python manage.py train_demo_policy [--minutes M] [--force]

Train the demo's policy (rollouts/demo_policy.py) on CPU, keep it under the data
directory, and register it as the global policy ``demo-policy``. Safe to run again: a
trained model is reused unless ``--force``.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from rollouts import demo_policy
from rollouts.services.demo import (
    POLICY_NAME,
    demo_policy_dir,
    demo_policy_register,
    demo_policy_report,
)


class Command(BaseCommand):
    help = (
        "Train the demo policy (a small causal LM on the demo's arithmetic problems) and"
        " register it as the policy 'demo-policy'; prints a one-line JSON summary last."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--minutes", type=float, default=15.0, help="most training wall time")
        parser.add_argument("--steps", type=int, default=1200, help="training steps")
        parser.add_argument("--force", action="store_true", help="train again")
        parser.add_argument(
            "--evaluate",
            type=int,
            default=0,
            metavar="N",
            help="then report the solve rate on N of the demo's problems",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = demo_policy_dir()
        report = None if options["force"] else demo_policy_report()
        trained = report is None
        if report is None:
            report = demo_policy.train(
                path,
                minutes=options["minutes"],
                max_steps=options["steps"],
                log=lambda line: self.stderr.write(line) if options["verbosity"] > 1 else None,
            ).to_dict()
        policy = demo_policy_register()
        summary: dict[str, Any] = {"policy": policy.pk, "name": POLICY_NAME, "trained": trained}
        summary.update(report)
        if options["evaluate"]:
            summary.update(demo_policy.evaluate(path, tasks=options["evaluate"]))
        self.stdout.write(json.dumps(summary))
