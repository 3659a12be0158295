"""API throttles. The default per-user rate (``STEPSCOPE_API_RATE_USER``) counts requests:
a guard against a runaway script making many small calls. Writes that carry many items
in one request (a JSON push or an upload to ``/imports/``, ``/labels/bulk/``,
``/step-scores/import/``) are counted on a scope of their own instead
(``STEPSCOPE_API_RATE_BULK``), so a client pushing in bulk neither runs into the per-user
rate nor spends the budget its reads and polls need; what bounds those writes is the
size of a request (``STEPSCOPE_UPLOAD_MAX_BYTES``, the per-request item limits) and the
server's own speed."""

from __future__ import annotations

from rest_framework.throttling import BaseThrottle, UserRateThrottle


class BulkRateThrottle(UserRateThrottle):
    scope = "bulk"


# Set as ``throttle_classes`` on a bulk write (or returned by a view's ``get_throttles``
# for its bulk action).
BULK_THROTTLES: list[type[BaseThrottle]] = [BulkRateThrottle]
