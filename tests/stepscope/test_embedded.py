"""The embedded PostgreSQL runs with Stepscope's settings (embedded.SERVER_SETTINGS),
and a start-up puts back any that were changed."""

from __future__ import annotations

from django.conf import settings

from stepscope import embedded
from tests.waiting import wait_until


def _setting(address: embedded.PostgresAddress, name: str) -> str:
    with address.connect() as conn:
        row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
    assert row is not None
    return str(row[0])


def test_start_up_sets_the_wal_writer_delay_again_after_a_reset() -> None:
    address = embedded.postgres_ensure(settings.DATA_DIR)
    with address.connect() as conn:
        conn.execute("ALTER SYSTEM RESET wal_writer_delay")
        conn.execute("SELECT pg_reload_conf()")
    # The reload is a signal: new sessions see it shortly after.
    assert wait_until(lambda: _setting(address, "wal_writer_delay") == "200ms", timeout=10)

    embedded.postgres_ensure(settings.DATA_DIR)

    assert wait_until(lambda: _setting(address, "wal_writer_delay") == "10ms", timeout=10)
