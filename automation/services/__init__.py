"""Writes of the automation app, by topic: rules and what they do as trajectories arrive
(``rules.py``), webhooks and their deliveries (``webhooks.py``). The names below are
the app's service interface; callers import them from here."""

from automation.services.rules import (
    RuleError,
    rule_backfill,
    rule_backfill_start,
    rule_create,
    rule_fire,
    rule_set_active,
    rules_apply,
    rules_arrived,
    rules_sweep,
)
from automation.services.webhooks import (
    WebhookError,
    webhook_create,
    webhook_delete,
    webhook_deliver,
    webhook_event_record,
    webhook_events_record,
    webhook_redeliver,
    webhook_set_active,
    webhooks_sweep,
)

__all__ = [
    "RuleError",
    "WebhookError",
    "rule_backfill",
    "rule_backfill_start",
    "rule_create",
    "rule_fire",
    "rule_set_active",
    "rules_apply",
    "rules_arrived",
    "rules_sweep",
    "webhook_create",
    "webhook_delete",
    "webhook_deliver",
    "webhook_event_record",
    "webhook_events_record",
    "webhook_redeliver",
    "webhook_set_active",
    "webhooks_sweep",
]
