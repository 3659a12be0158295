"""python manage.py reward_worker [--batch N]

The reward service's worker (``scoring/rewards/serve.py``): it drains the requests the
web side queues in Redis, up to N at a time, scores them with the scorer each names
(loaded once and kept; an LLM judge is asked, its calls of the pass together), and
answers each on its own key. Run one per GPU, beside the
Celery workers; SIGTERM or Ctrl-C stops it after the pass in hand."""

from __future__ import annotations

import signal
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from scoring.rewards.serve import RewardWorker, model_loader
from scoring.services.rewards import reward_channel


class Command(BaseCommand):
    help = "Serve rewards: drain the reward requests, score them in batches, answer each."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--batch",
            type=int,
            default=settings.STEPSCOPE_REWARDS_BATCH,
            help="requests taken into one pass of the model (STEPSCOPE_REWARDS_BATCH)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        stopping: list[int] = []

        def stop(signum: int, frame: Any) -> None:
            stopping.append(signum)

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        worker = RewardWorker(reward_channel(), load=model_loader(), max_requests=options["batch"])
        self.stdout.write(f"reward worker: serving, up to {options['batch']} requests a pass")
        self.stdout.flush()
        worker.run(stop=lambda: bool(stopping))
        self.stdout.write(f"reward worker: stopped after {worker.served} requests")
