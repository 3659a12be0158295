"""Planner statistics brought up to date as soon as a transaction has grown tables by much.

PostgreSQL plans with the row counts and value statistics ``ANALYZE`` last saw. After a
large import autovacuum analyses the tables it grew on its next round, up to a minute
later (``autovacuum_naptime``), and in that window a query planned for the old, small
tables can take seconds: the export preview over a million labelled steps took ~2.5 s
each time the form changed, against 0.5 s once analysed. :func:`analyze_when_grown` takes
autovacuum's own rule, a table changed by more than ``autovacuum_analyze_threshold`` +
``autovacuum_analyze_scale_factor`` times its rows, for the tables this transaction changed,
and analyses them right after the commit instead: in the importing process for a file
(a worker's or the CLI's), in a worker for an API push (its client does not wait).
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import connection, transaction

# The tables the current transaction changed by more than autovacuum's analyze threshold.
# pg_stat_xact_user_tables counts this transaction's own writes, the ones triggers made
# included; reltuples is -1 for a table never analysed.
_GROWN_SQL = """
SELECT quote_ident(x.schemaname) || '.' || quote_ident(x.relname)
FROM pg_stat_xact_user_tables x JOIN pg_class c ON c.oid = x.relid
WHERE x.n_tup_ins + x.n_tup_upd + x.n_tup_del
      > current_setting('autovacuum_analyze_threshold')::float8
        + current_setting('autovacuum_analyze_scale_factor')::float8 * greatest(c.reltuples, 0)
ORDER BY 1
"""


def grown_tables() -> list[str]:
    """The tables (schema-qualified, quoted) this transaction has changed by more than
    autovacuum's analyze threshold."""
    with connection.cursor() as cursor:
        cursor.execute(_GROWN_SQL)
        return [name for (name,) in cursor.fetchall()]


def analyze_when_grown(later: Callable[[list[str]], None] | None = None) -> list[str]:
    """Call inside a transaction, after its big writes: the tables it grew past the
    threshold are analysed once it commits (nothing happens if it rolls back), here, or
    handed to ``later`` (a worker's task, off a request's time). Returns their names."""
    tables = grown_tables()
    if tables:
        transaction.on_commit(lambda: (later or analyze)(tables))
    return tables


def analyze(tables: list[str]) -> list[str]:
    """``ANALYZE`` those of the tables that exist, in one statement (a sample of each:
    about 0.1-0.3 s a table of a million rows; it blocks no reads or writes). The names
    may come through the broker, so only names PostgreSQL resolves to a table are used,
    as it spells them. Returns them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT to_regclass(name)::text FROM unnest(%s::text[]) name"
            " WHERE to_regclass(name) IS NOT NULL",
            [tables],
        )
        names = [name for (name,) in cursor.fetchall()]
        if names:
            cursor.execute(f"ANALYZE {', '.join(names)}")
    return names
