"""Progress of a long job, written where a progress bar can see it at once."""

from __future__ import annotations

import time
from typing import Any

import psycopg
from django.db import connection


class ProgressWriter:
    """Sets ``table.column`` for one row on its own autocommit connection, so pages see
    the figure while the job's own transaction is still open; at most once a second.
    ``check`` reads the row's status back on the same connection (for cancelling)."""

    def __init__(self, table: str, row_id: int, column: str, *, first_after: float = 0.0) -> None:
        """``first_after``: seconds before the first figure is written (0: at the first
        report). A job that usually ends sooner (an API push) then never opens the side
        connection, which costs a PostgreSQL backend of its own."""
        self.table, self.row_id, self.column = table, row_id, column
        self.done = 0
        self.last = time.monotonic() - 1.0 + first_after if first_after else 0.0
        self.conn: psycopg.Connection[Any] | None = None

    def report(self, amount: int) -> bool:
        """Add ``amount``; return True when the figure was written just now."""
        self.done += amount
        now = time.monotonic()
        if now - self.last < 1.0:
            return False
        self.last = now
        self._connection().execute(
            f"UPDATE {self.table} SET {self.column} = %s WHERE id = %s",  # names are ours
            (self.done, self.row_id),
        )
        return True

    def status(self) -> str | None:
        row = (
            self._connection()
            .execute(f"SELECT status FROM {self.table} WHERE id = %s", (self.row_id,))
            .fetchone()
        )
        return None if row is None else str(row[0])

    def _connection(self) -> psycopg.Connection[Any]:
        if self.conn is None:
            params = {
                k: v
                for k, v in connection.get_connection_params().items()
                if k not in {"cursor_factory", "context"}
            }
            self.conn = psycopg.connect(**params, autocommit=True)
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
