"""Migrating the test database back to an older migration and forward again, for the
tests of a data migration (they write rows the way the old schema held them, then
migrate forward).

Django's ``MigrationExecutor.migrate`` renders the models of the whole project state
before the first migration it runs and carries that rendered state through every
operation of every migration, re-rendering at each one the models related to the model
it changes: with every model pointing at a project, that is most of the project's 96
models at each of the 65 operations between labeling 0005 and the latest migrations,
about 9 s of CPU back and 9 s forward (a minute of a loaded run).

``migrate_back`` and ``migrate_to_latest`` walk the same plans and run the same
operations against the database, in the same transactions, and record them in the
migration table as Django does; only the states they hand each operation differ. The
states between operations are computed without rendering, and an operation is given the
part of them it acts on: the models it names, those that point at them, and everything
these point at, so that every relation resolves (about 10 models). A part is rendered
only if the operation reads it (RunSQL never does) and once for consecutive operations
on the same model; an operation that may read any model (RunSQL, RunPython) gets the
whole state. About 1.7 s back and 1.8 s forward. tests/test_migrating.py checks that
going back and forward again leaves the schema ``manage.py migrate`` built.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.migrations.exceptions import IrreversibleError
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.migration import Migration
from django.db.migrations.operations.base import Operation
from django.db.migrations.operations.fields import FieldOperation
from django.db.migrations.operations.models import (
    CreateModel,
    DeleteModel,
    IndexOperation,
    ModelOptionOperation,
)
from django.db.migrations.state import ProjectState
from django.db.migrations.utils import resolve_relation  # type: ignore[attr-defined]

ModelKey = tuple[str, str]


def _seeds(operation: Operation, app_label: str) -> set[ModelKey] | None:
    """The models an operation acts on, or None where it may read any (RunSQL, RunPython,
    an operation this module does not know)."""
    if isinstance(operation, FieldOperation | IndexOperation):
        return {(app_label, operation.model_name_lower)}
    if isinstance(operation, CreateModel | DeleteModel | ModelOptionOperation):
        return {(app_label, operation.name_lower)}
    return None


def _targets(state: ProjectState, key: ModelKey) -> set[ModelKey]:
    """The models ``key``'s fields point at (through models too) and its model bases."""
    model = state.models[key]
    targets = set()
    for field in model.fields.values():
        remote = field.remote_field
        if remote is not None:
            targets.add(resolve_relation(remote.model, *key))
            if getattr(remote, "through", None) is not None:
                targets.add(resolve_relation(remote.through, *key))
    targets.update(resolve_relation(base, *key) for base in model.bases if isinstance(base, str))
    return {target for target in targets if target in state.models}


def _part(state: ProjectState, seeds: set[ModelKey] | None) -> ProjectState:
    """The part of ``state`` an operation on ``seeds`` renders: those models, the models
    that point at them (whose foreign keys an altered column carries along), and all
    that these point at, so that every relation resolves."""
    if seeds is None:
        return state
    targets = {key: _targets(state, key) for key in state.models}
    keys = {key for key in seeds if key in state.models}
    keys |= {key for key, points_at in targets.items() if points_at & keys}
    todo = list(keys)
    while todo:
        for target in targets[todo.pop()] - keys:
            keys.add(target)
            todo.append(target)
    return ProjectState(models={key: state.models[key] for key in keys}, real_apps=state.real_apps)


def _run(migration: Migration, state: ProjectState, schema_editor: Any, *, backwards: bool) -> None:
    """``Migration.apply`` (or ``unapply``) with each operation's states rendered only
    where the operation reads them, and then only the models it acts on."""
    # The states between the operations: operation i goes from states[i] to states[i + 1].
    states = [state.clone()]
    for operation in migration.operations:
        if backwards and not operation.reversible:
            raise IrreversibleError(f"Operation {operation} in {migration} is not reversible")
        operation.state_forwards(migration.app_label, state)
        states.append(state.clone())
    steps = list(enumerate(migration.operations))
    if backwards:
        steps.reverse()
    # Consecutive operations on the same models share the state between them, rendered once.
    parts: dict[tuple[int, frozenset[ModelKey] | None], ProjectState] = {}

    def part(index: int, seeds: set[ModelKey] | None) -> ProjectState:
        key = (index, None if seeds is None else frozenset(seeds))
        if key not in parts:
            parts[key] = _part(states[index], seeds)
        return parts[key]

    for index, operation in steps:
        seeds = _seeds(operation, migration.app_label)
        before, after = part(index, seeds), part(index + 1, seeds)
        if backwards:
            run, from_state, to_state = operation.database_backwards, after, before
        else:
            run, from_state, to_state = operation.database_forwards, before, after
        atomic = operation.atomic or (migration.atomic and operation.atomic is not False)
        if not schema_editor.atomic_migration and atomic:
            with transaction.atomic(schema_editor.connection.alias):
                run(migration.app_label, schema_editor, from_state, to_state)
        else:
            run(migration.app_label, schema_editor, from_state, to_state)


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
        # As MigrationExecutor.unapply_migration does.
        with connection.schema_editor(atomic=migration.atomic) as schema_editor:
            _run(migration, states[migration], schema_editor, backwards=True)
        for app_label, name in migration.replaces:
            executor.recorder.record_unapplied(app_label, name)
        executor.recorder.record_unapplied(migration.app_label, migration.name)


def migrate_to_latest(connection: Any) -> None:
    """Apply every migration not applied yet, as ``MigrationExecutor(connection).migrate``
    to the leaf nodes does."""
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    assert all(not backwards for _, backwards in plan)
    executor.recorder.ensure_schema()
    # The state of the migrations applied, then those to apply in the order of the plan
    # on an empty database, as _migrate_all_forwards runs them.
    full_plan = executor.migration_plan(executor.loader.graph.leaf_nodes(), clean_start=True)
    state = ProjectState(real_apps=executor.loader.unmigrated_apps)
    for migration, _ in full_plan:
        if (migration.app_label, migration.name) in executor.loader.applied_migrations:
            migration.mutate_state(state, preserve=False)
    to_run = {migration for migration, _ in plan}
    for migration in (migration for migration, _ in full_plan if migration in to_run):
        # As MigrationExecutor.apply_migration does: recorded in the migration's
        # transaction unless SQL is deferred to its end.
        with connection.schema_editor(atomic=migration.atomic) as schema_editor:
            _run(migration, state, schema_editor, backwards=False)
            recorded = not schema_editor.deferred_sql
            if recorded:
                executor.record_migration(migration)
        if not recorded:
            executor.record_migration(migration)
    executor.check_replacements()
