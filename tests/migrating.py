"""Migrating the test database back to an older migration, for the tests of a data
migration (they write rows the way the old schema held them, then migrate forward).

Django's ``MigrationExecutor.migrate`` backwards renders the models of the whole project
state at the first migration it will unapply and then carries that rendered state
through every later migration of every app, re-rendering the related models at each
operation: with every model pointing at a project, 10-11 s of CPU to go back to labeling
0005 or 0007 (two minutes of a loaded run). ``migrate_back`` computes the same states
(the same walk over the same plan) without rendering, and renders each one once, just
before its migration is unapplied: 4-5 s.
"""

from __future__ import annotations

from typing import Any

from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.state import ProjectState


def migrate_back(connection: Any, target: tuple[str, str]) -> None:
    """Unapply the migrations after ``target`` (and those that depend on them), as
    ``MigrationExecutor(connection).migrate([target])`` does."""
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan([target])
    assert plan and all(backwards for _, backwards in plan), f"{target} is not behind"
    full_plan = executor.migration_plan(executor.loader.graph.leaf_nodes(), clean_start=True)
    to_run = {migration for migration, _ in plan}
    applied = {
        executor.loader.graph.nodes[key]
        for key in executor.loader.applied_migrations
        if key in executor.loader.graph.nodes
    }
    # The state before each migration to unapply, as _migrate_all_backwards builds it.
    states: dict[Any, ProjectState] = {}
    state = ProjectState(real_apps=executor.loader.unmigrated_apps)
    for migration, _ in full_plan:
        if not to_run:
            break
        if migration in to_run:
            states[migration] = state.clone()
            migration.mutate_state(state, preserve=False)
            to_run.remove(migration)
        elif migration in applied:
            migration.mutate_state(state, preserve=False)
    for migration, _ in plan:
        before = states[migration]
        before.apps  # noqa: B018 -- rendered once, so that unapplying reloads, not renders
        executor.unapply_migration(before, migration)


def migrate_to_latest(connection: Any) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
