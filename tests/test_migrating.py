"""The data-migration tests' way back and forward (tests/migrating.py): it renders only
part of each state, so a test checks that going back and forward again leaves the
schema that ``manage.py migrate`` built, and records the same migrations."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.migrating import migrate_back, migrate_to_latest

pytestmark = pytest.mark.django_db

SCHEMA = {
    "columns": """
        SELECT table_name, column_name, data_type, is_nullable, column_default,
               character_maximum_length, numeric_precision
        FROM information_schema.columns WHERE table_schema = 'public'""",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'",
    "constraints": """
        SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid),
               c.condeferrable, c.condeferred
        FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
        WHERE n.nspname = 'public'""",
    "triggers": """
        SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid)
        FROM pg_trigger WHERE NOT tgisinternal""",
    "functions": """
        SELECT p.proname, pg_get_functiondef(p.oid)
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'public' AND p.prokind = 'f'""",
    "migrations": "SELECT app, name FROM django_migrations",
}


def schema() -> dict[str, list[tuple[Any, ...]]]:
    with connection.cursor() as cursor:
        described = {}
        for part, sql in SCHEMA.items():
            cursor.execute(sql)
            described[part] = sorted(cursor.fetchall(), key=repr)
        return described


def test_back_and_forward_again_leaves_the_schema_migrate_built() -> None:
    built = schema()
    assert all(built.values())
    migrate_back(connection, ("labeling", "0005_decisive_failure"))
    back = schema()
    assert ("labeling", "0006_superseded_labels") not in back["migrations"]
    assert ("automation", "0001_initial") not in back["migrations"]
    assert not [row for row in back["columns"] if row[0] == "labeling_queuecounts"]

    migrate_to_latest(connection)

    assert schema() == built
    executor = MigrationExecutor(connection)
    assert executor.migration_plan(executor.loader.graph.leaf_nodes()) == []
