"""Logging filters named in ``settings.LOGGING``."""

from __future__ import annotations

import logging


class ClientErrorsWithoutTraceback(logging.Filter):
    """A refused request (403, 404 and the other 4xx that Django logs from an exception)
    is the client's error, not the server's: its line stays, its traceback goes, so a log
    of routine refusals does not bury the tracebacks of real failures."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500:
            record.exc_info = None
            record.exc_text = None
        return True
