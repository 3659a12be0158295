"""Thin Celery wrappers; the work is in ``automation.services``."""

from __future__ import annotations

from celery import shared_task

from automation import services
from stepscope.jobs.retry import REDELIVERABLE


@shared_task(name="automation.rules_apply", **REDELIVERABLE)
def rules_apply(
    project_id: int, trajectory_ids: list[int], import_batch_id: int | None, source: str
) -> int:
    return services.rules_apply(
        project_id=project_id,
        trajectory_ids=trajectory_ids,
        import_batch_id=import_batch_id,
        source=source,
    )


@shared_task(name="automation.rule_backfill", **REDELIVERABLE)
def rule_backfill(rule_id: int) -> int:
    return services.rule_backfill(rule_id=rule_id)


@shared_task(name="automation.webhook_deliver", **REDELIVERABLE)
def webhook_deliver(delivery_id: int) -> None:
    services.webhook_deliver(delivery_id=delivery_id)


@shared_task(name="automation.rules_sweep")
def rules_sweep() -> int:
    return services.rules_sweep()


@shared_task(name="automation.webhooks_sweep")
def webhooks_sweep() -> int:
    return services.webhooks_sweep()
