"""The committing tests' flush (tests/databases.py): it leaves every model table empty,
as Django's TRUNCATE does, and truncates a table that has grown, so that its dead rows
are not left for later tests to read."""

from __future__ import annotations

import secrets

import pytest
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.db import connection

from labeling.models import LabelSchema, StepLabel
from tests.databases import FLUSH_BYTES, tables_flush
from tests.factories import trajectory_with_steps
from trajectories.models import Project, Step

pytestmark = pytest.mark.django_db(transaction=True)


def _rows() -> dict[str, int]:
    tables = connection.introspection.django_table_names(only_existing=True)
    with connection.cursor() as cursor:
        counts = {}
        for table in tables:
            cursor.execute(f"SELECT count(*) FROM {connection.ops.quote_name(table)}")
            counts[table] = cursor.fetchone()[0]
    return {table: count for table, count in counts.items() if count}


def test_the_flush_empties_every_table_but_the_content_types(project: Project, owner: User) -> None:
    trajectory = trajectory_with_steps(project, ["a", "b"])
    step = Step.objects.get(trajectory=trajectory, index=0)
    # A label: its triggers keep counts in tables of their own.
    schema = LabelSchema.objects.get(project=project, is_active=True)
    StepLabel.objects.create(step=step, annotator=owner, schema=schema, value=1)
    assert {"labeling_steplabel", "trajectories_step"} <= set(_rows())
    types = ContentType.objects.count()

    assert tables_flush("default") == []

    assert set(_rows()) == {"django_content_type", "auth_permission"}
    assert ContentType.objects.count() == types


def test_a_table_grown_past_the_bound_is_truncated_and_the_rest_deleted(
    project: Project, owner: User
) -> None:
    # Random text, which PostgreSQL cannot compress: the rows take their length.
    trajectory = trajectory_with_steps(
        project, [secrets.token_hex(2000) for _ in range(FLUSH_BYTES // 4000 + 50)]
    )
    step = Step.objects.get(trajectory=trajectory, index=0)
    schema = LabelSchema.objects.get(project=project, is_active=True)
    StepLabel.objects.create(step=step, annotator=owner, schema=schema, value=1)
    types = ContentType.objects.count()

    assert tables_flush("default") == ["trajectories_step"]

    assert set(_rows()) == {"django_content_type", "auth_permission"}
    assert ContentType.objects.count() == types
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_table_size('trajectories_step')")
        assert cursor.fetchone()[0] < FLUSH_BYTES // 16
