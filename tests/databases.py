"""The test database of one test process: a copy of a migrated template.

Migrating an empty database takes most of a minute here; copying one takes a second. The
template is named after a digest of every installed app's migration files, so it is made
once per change to the migrations and then shared by every worker and every later run
(``CREATE DATABASE … TEMPLATE``). Each process then gets its own database,
``test_stepscope_<run>_<worker>`` (``tests/isolation.py``).

A process holds an advisory lock named after its database for as long as it lives, on a
connection to the server's ``postgres`` database. A test database whose lock nobody holds
belongs to a run that is gone (killed, or stopped in a debugger), and the next run drops
it; so do templates of other migrations. Template work happens under one more lock, so
two runs starting together make the template once.

The template's tables have autovacuum off (``TABLE_OPTIONS``), and so have their copies.
Most tests write in a transaction that is rolled back, so a table autovacuum visits
holds only dead rows: it records the table as empty, and a later test's queries are
planned for empty tables. The labeling triggers' recount then ran as nested loops over
whole tables: inserting 200 labels took from 6 s to minutes (tests/exports/test_bulk.py's
fixtures, at random, whenever autovacuum had just passed). A copy that is never
vacuumed keeps PostgreSQL's estimate from the table's size instead. A copy lives for one
run, so the dead rows it gathers stay few.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from django.apps import apps
from django.conf import settings
from django.core.management import call_command
from django.db import connections

TEST_PREFIX = "test_stepscope_"
TEMPLATE_PREFIX = "stepscope_tpl_"
TEMPLATE_LOCK = "stepscope-test-template"
# Set on every table of the template (see above); part of the template's name.
TABLE_OPTIONS = "autovacuum_enabled = false, toast.autovacuum_enabled = false"


def migrations_digest() -> str:
    """Changes whenever any installed app's migrations change (ours or a library's), or
    which apps' migrations run (``MIGRATION_MODULES``)."""
    digest = hashlib.sha256()
    modules = getattr(settings, "MIGRATION_MODULES", {})
    digest.update(repr(sorted(modules.items())).encode())
    digest.update(TABLE_OPTIONS.encode())
    for config in sorted(apps.get_app_configs(), key=lambda config: config.label):
        if config.label in modules and modules[config.label] is None:
            continue
        for path in sorted(Path(config.path).glob("migrations/*.py")):
            digest.update(f"{config.label}/{path.name}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _maintenance_connect(settings_dict: dict[str, Any]) -> psycopg.Connection[Any]:
    return psycopg.connect(
        dbname="postgres",
        user=settings_dict.get("USER") or None,
        password=settings_dict.get("PASSWORD") or None,
        host=settings_dict.get("HOST") or None,
        port=settings_dict.get("PORT") or None,
        autocommit=True,
    )


def _existing(conn: psycopg.Connection[Any], prefix: str) -> list[str]:
    rows = conn.execute(
        "SELECT datname FROM pg_database WHERE starts_with(datname, %s)", (prefix,)
    ).fetchall()
    return [row[0] for row in rows]


def _drop(conn: psycopg.Connection[Any], name: str) -> None:
    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def _locked(conn: psycopg.Connection[Any], key: str) -> Iterator[None]:
    conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
    try:
        yield
    finally:
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))


def _drop_abandoned(conn: psycopg.Connection[Any]) -> None:
    for name in _existing(conn, TEST_PREFIX):
        row = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (name,)).fetchone()
        if row is not None and row[0]:
            _drop(conn, name)
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (name,))


def _template_ensure(conn: psycopg.Connection[Any], template: str) -> None:
    """Migrate a new database and only then give it the template's name, so a run that
    was killed half way leaves no half-migrated template behind."""
    if template in _existing(conn, template):
        return
    building = f"{template}_building"
    _drop(conn, building)
    conn.execute(f'CREATE DATABASE "{building}"')
    connection = connections["default"]
    connection.close()
    connection.settings_dict["NAME"] = building
    try:
        call_command("migrate", interactive=False, verbosity=0)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT quote_ident(schemaname) || '.' || quote_ident(tablename)"
                " FROM pg_tables WHERE schemaname = 'public'"
            )
            for (table,) in cursor.fetchall():
                cursor.execute(f"ALTER TABLE {table} SET ({TABLE_OPTIONS})")
    finally:
        connections.close_all()
    conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{template}"')


class TestDatabase:
    """Creates this process's database on entry and drops it on exit."""

    def __init__(self, name: str) -> None:
        self.name = TEST_PREFIX + name
        self.settings_dict = connections["default"].settings_dict
        self.conn = _maintenance_connect(self.settings_dict)

    def create(self) -> None:
        conn = self.conn
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (self.name,))
        template = TEMPLATE_PREFIX + migrations_digest()
        with _locked(conn, TEMPLATE_LOCK):
            _drop_abandoned(conn)
            for other in _existing(conn, TEMPLATE_PREFIX):
                if other != template:
                    _drop(conn, other)
            _template_ensure(conn, template)
            conn.execute(f'CREATE DATABASE "{self.name}" TEMPLATE "{template}"')
        from django.conf import settings

        self.settings_dict["NAME"] = self.name
        settings.DATABASES["default"]["NAME"] = self.name

    def drop(self) -> None:
        connections.close_all()
        _drop(self.conn, self.name)
        self.conn.close()
