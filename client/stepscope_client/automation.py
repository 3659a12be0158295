"""Rules and webhooks, for a project's admins: a rule acts on each trajectory that arrives
and matches its selection (fill a queue, start a scoring or judge run, export, call a
webhook); a webhook hears of the project's events, signed (docs/api.md, "Webhooks").
Refusals raise ``StepscopeError`` with the status and the field errors."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any


class AutomationCalls:
    """Mixed into ``Client``."""

    if TYPE_CHECKING:

        def _request(self, method: str, path: str, **kwargs: Any) -> Any: ...

        def _pages(self, path: str, params: Mapping[str, str]) -> Iterator[dict[str, Any]]: ...

    def create_rule(
        self,
        project: str,
        name: str,
        action: str,
        *,
        selection: Mapping[str, Any] | None = None,
        rate: float = 1.0,
        active: bool = True,
        **target: Any,
    ) -> dict[str, Any]:
        """A rule on the trajectories that arrive in ``project`` and match ``selection``
        (the list's filters: ``{"outcome": "failure"}``), a ``rate`` of them sampled:
        ``action`` is ``queue`` (``queue=<id>``), ``score`` or ``judge``
        (``scorer="<name>"``), ``export`` (``export={...}``, an export request's fields)
        or ``webhook`` (``webhook=<id>``). An unknown filter is a 400 naming it."""
        body: dict[str, Any] = {
            "project": project,
            "name": name,
            "action": action,
            "rate": rate,
            "active": active,
            **target,
        }
        if selection is not None:
            body["selection"] = dict(selection)
        return dict(self._request("POST", "rules/", json=body))

    def rules(self, project: str) -> list[dict[str, Any]]:
        """The project's rules, each with how many trajectories it acted on."""
        return list(self._pages("rules/", {"project": project}))

    def rule_backfill(self, rule: int) -> dict[str, Any]:
        """Run the rule over the project's trajectories already there (on a worker; it
        never acts twice on one trajectory)."""
        return dict(self._request("POST", f"rules/{rule}/backfill/", json={}))

    def rule_set_active(self, rule: int, active: bool) -> dict[str, Any]:
        return dict(self._request("POST", f"rules/{rule}/active/", json={"active": active}))

    def rule_firings(self, rule: int) -> list[dict[str, Any]]:
        """What the rule did: the trajectory, when, what triggered it and the result."""
        return list(self._pages(f"rules/{rule}/firings/", {}))

    def create_webhook(
        self, project: str, name: str, url: str, events: list[str]
    ) -> dict[str, Any]:
        """A webhook for ``events`` (``export.ready``, ``batch.version``, ...). The answer's
        ``secret`` (to check each delivery's signature) is given this once."""
        body = {"project": project, "name": name, "url": url, "events": events}
        return dict(self._request("POST", "webhooks/", json=body))

    def webhooks(self, project: str) -> list[dict[str, Any]]:
        return list(self._pages("webhooks/", {"project": project}))

    def webhook_deliveries(self, webhook: int) -> list[dict[str, Any]]:
        """The webhook's deliveries, newest first, with their attempts' response codes."""
        return list(self._pages(f"webhooks/{webhook}/deliveries/", {}))

    def redeliver(self, delivery: int) -> dict[str, Any]:
        """Send a delivery again, under its own id (a receiver that dedupes keeps one)."""
        return dict(self._request("POST", f"webhook-deliveries/{delivery}/redeliver/", json={}))
