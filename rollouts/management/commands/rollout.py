"""python manage.py rollout --project SLUG --policy NAME --k K
[--steps all|first-error-search|IDS] [--critical] [--wait] [--against SOURCE]"""

from __future__ import annotations

import json
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from rollouts import answers, selectors
from rollouts.models import RolloutJob
from rollouts.services import RolloutError, rollout_job_start
from scoring.management.waiting import project_or_error
from trajectories.selection import COMMAND_HELP, SelectionError, selection_from_pairs


class Command(BaseCommand):
    help = (
        "Continue a project's trajectories k times from each step (or binary-search each"
        " failure's first error) with a policy on its Celery queue; prints a one-line JSON"
        " summary last."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--policy", required=True, help="policy name")
        parser.add_argument("--k", type=int, required=True, help="continuations per step")
        parser.add_argument(
            "--steps",
            default="all",
            help="all (every labelable step), first-error-search, or step ids: 12,13",
        )
        parser.add_argument(
            "--critical",
            action="store_true",
            help="with step ids: replace each step (a correction or a policy sample) first",
        )
        parser.add_argument(
            "--trajectory",
            type=int,
            action="append",
            dest="trajectories",
            metavar="ID",
            help="only this trajectory (repeatable)",
        )
        parser.add_argument("--outcome", choices=["success", "failure", "unknown"])
        parser.add_argument(
            "--filter", action="append", default=[], metavar="NAME=VALUE", help=COMMAND_HELP
        )
        parser.add_argument("--answer-check", default=answers.DEFAULT_CHECK)
        parser.add_argument("--max-continuations", type=int, help="continuation budget")
        parser.add_argument("--max-tokens", type=int, help="generated-token budget")
        parser.add_argument("--chunk", type=int, help="continuations per Celery task")
        parser.add_argument(
            "--against",
            metavar="SOURCE",
            default="",
            help="when the job ends, compare its MC labels with this label source, e.g."
            " import:synthetic-truth (in the job's result: agreement)",
        )
        parser.add_argument("--wait", action="store_true", help="wait until the job ends")
        parser.add_argument("--timeout", type=float, default=3600, help="seconds to --wait")

    def handle(self, *args: Any, **options: Any) -> None:
        project = project_or_error(options["project"])
        policy = selectors.policy_by_name(project, options["policy"])
        if policy is None:
            raise CommandError(f"no policy {options['policy']!r} for project {project.slug!r}")
        steps: str = options["steps"]
        step_ids = None
        if steps in (RolloutJob.Mode.ALL, RolloutJob.Mode.SEARCH):
            mode = steps
        else:
            try:
                step_ids = [int(part) for part in steps.split(",") if part.strip()]
            except ValueError:
                raise CommandError(
                    "--steps takes all, first-error-search or comma-separated step ids"
                ) from None
            mode = RolloutJob.Mode.CRITICAL if options["critical"] else RolloutJob.Mode.STEPS
        pairs = [
            *options["filter"],
            *([f"outcome={options['outcome']}"] if options["outcome"] else []),
        ]
        try:
            filters = selection_from_pairs(pairs)
            job = rollout_job_start(
                project=project,
                policy=policy,
                k=options["k"],
                mode=mode,
                step_ids=step_ids,
                trajectory_ids=options["trajectories"],
                filters=filters,
                answer_check=options["answer_check"],
                max_continuations=options["max_continuations"],
                max_tokens=options["max_tokens"],
                chunk_continuations=options["chunk"],
                against=options["against"],
            )
        except (RolloutError, SelectionError) as error:
            raise CommandError(str(error)) from None
        if options["wait"]:
            job = _wait_for(job, timeout=options["timeout"])
        summary = job_summary_line(job)
        if "agreement" in job.result:
            summary["agreement"] = job.result["agreement"]
        self.stdout.write(json.dumps(summary))
        if job.status == RolloutJob.Status.FAILED:
            raise SystemExit(1)


def _wait_for(job: RolloutJob, *, timeout: float, poll: float = 0.5) -> RolloutJob:
    """Poll the database until the job leaves queued/running (workers do the work)."""
    deadline = time.monotonic() + timeout
    while True:
        job.refresh_from_db()
        if not job.is_active:
            return job
        if time.monotonic() > deadline:
            raise CommandError(
                f"job {job.pk} still {job.status} after {timeout:.0f}s ({job.done}/{job.total});"
                " is a worker consuming its queue?"
            )
        time.sleep(poll)


def job_summary_line(job: RolloutJob) -> dict[str, Any]:
    def rounded(value: float | None) -> float | None:
        return round(value, 2) if value is not None else None

    return {
        "job": job.pk,
        "status": job.status,
        "mode": job.mode,
        "policy": job.policy.name if job.policy else None,
        "k": job.k,
        "total": job.total,
        "done": job.done,
        "successes": job.successes,
        "tokens": job.tokens,
        "truncated": job.truncated,
        "continuations_per_second": rounded(job.continuations_per_second),
        "tokens_per_second": rounded(job.tokens_per_second),
        "result": job.result,
        "error": job.error or None,
    }
