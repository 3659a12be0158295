"""What this app hangs on the lower apps' hooks: its rules on the trajectories' arrivals,
its webhooks on the project events."""

from __future__ import annotations

from automation.services import rules_arrived, webhook_events_record
from stepscope.events import event_listener_register
from trajectories.arrivals import arrival_listener_register


def install() -> None:
    arrival_listener_register(rules_arrived)
    event_listener_register(webhook_events_record)
