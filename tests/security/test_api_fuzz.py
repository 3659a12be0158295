"""The REST API under schemathesis: cases generated from our own OpenAPI schema
(``/api/v1/schema/``, loaded through the WSGI app in this process), valid and invalid,
sent as a project admin with a token. No answer may be a server error.

Randomly generated ids and slugs mostly miss, so half of the cases have their path
parameters and the project, step, scorer and policy of their body pointed at real
objects of one project; the other half stay as generated. Each case's writes are
rolled back so the next one meets the same project."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import hypothesis
import pytest
import schemathesis
from django.core.cache import cache
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi._hypothesis import ParameterLocation, _draw_negated_locations

from tests.security.world import World, build_world

pytestmark = pytest.mark.django_db

# Per operation and generation mode, with ~50 operations: about 400 cases, derandomised
# so a failure reproduces. Generating a case costs more than sending it (schemathesis
# draws and throws away most negative cases), so this count is most of the test's time:
# 8 made it the suite's longest test. STEPSCOPE_FUZZ_EXAMPLES=200 runs a deeper search
# by hand.
EXAMPLES = int(os.environ.get("STEPSCOPE_FUZZ_EXAMPLES", "4"))
# The operations are dealt out over this many tests (operation i to test i % SHARDS),
# so the suite's processes share the fuzzing instead of one of them doing it all.
SHARDS = 4


def _point_at_world(case: Any, world: World) -> None:
    """Aim the case at the world's objects: ids in the path by the path's first word,
    and the body's references by field name."""
    objects = {
        "projects": world.project.slug,
        "trajectories": world.trajectory.pk,
        "steps": world.step.pk,
        "imports": world.import_batch.pk,
        "exports": world.export_job.pk,
        "labels": world.label.pk,
        "scorers": world.scorer.pk,
        "scoring-runs": world.scoring_run.pk,
        "attribution-runs": world.attribution_run.pk,
        "policies": world.policy.pk,
        "rollouts": world.rollout_job.pk,
    }
    first = case.operation.path.strip("/").split("/")[2]
    for name in list(case.path_parameters or {}):
        if name in ("id", "pk", "slug"):
            case.path_parameters[name] = objects.get(first, world.project.slug)
        elif name == "name":
            case.path_parameters[name] = world.export_file
    references = {
        "project": world.project.slug,
        "step": world.step.pk,
        "trajectory": world.trajectory.pk,
        "scorer": world.scorer.name,
        "policy": world.policy.name,
        "steps": [world.step.pk],
        "trajectories": [world.trajectory.pk],
    }
    for part in (case.body, case.query):
        if isinstance(part, dict):
            for key, value in references.items():
                if key in part:
                    part[key] = value


# The reward routes answer 503 with Retry-After while no reward worker runs (none does
# here): the service's documented state, not a fault. Any other 5xx of theirs still fails.
UNAVAILABLE_WITHOUT_WORKER = {"POST /api/v1/rewards/", "POST /api/v1/rewards/openrlhf/"}


def _unavailable_as_documented(label: str, error: str) -> bool:
    return (
        label in UNAVAILABLE_WITHOUT_WORKER
        and "[503] Service Unavailable" in error
        and "no reward worker is running" in error
        and "[500]" not in error
    )


@pytest.fixture
def wsgi_app() -> Iterator[Any]:
    """The project's WSGI application, called in this thread. Like Django's test client
    it must not close the database connection at each request's start and end: the
    connection holds the test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield get_wsgi_application()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def _operations(wsgi_app: Any) -> list[Any]:
    schema = schemathesis.openapi.from_wsgi("/api/v1/schema/", wsgi_app)
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), f"the schema has an invalid operation: {result.err()}"
        operations.append(result.ok())
    assert len(operations) > 25, "the schema lists far fewer operations than the API has"
    return operations


class _Drew(Exception):
    pass


def _no_draw(strategy: Any, label: object = None) -> Any:
    raise _Drew


def _has_invalid_cases(operation: Any) -> bool:
    """Whether schemathesis can break anything the operation takes (a parameter or a
    body it knows how to make invalid), by its own rule: it draws which of them to break
    only when there is one. Without one, every invalid case it draws is rejected, and
    Hypothesis gives up (Unsatisfiable) only after some 500 of them: for the nine such
    operations, over half of all the fuzzing's time, for no request sent."""
    locations = dict.fromkeys(ParameterLocation)
    try:
        chosen = _draw_negated_locations(
            cast(Any, _no_draw),
            operation,
            GenerationMode.NEGATIVE,
            explicit=locations,
            body_is_generated=True,
        )
    except _Drew:
        return True
    return chosen is not None


@pytest.mark.parametrize("shard", range(SHARDS))
def test_no_api_call_is_a_server_error(shard: int, tmp_path: Path, wsgi_app: Any) -> None:
    world = build_world(tmp_path, text="fuzz")
    token = world.token("admin")
    # Together the shards take every operation: shard i takes i, i + SHARDS, ...
    operations = _operations(wsgi_app)[shard::SHARDS]
    assert operations, "a shard with no operation"
    failures: list[str] = []
    calls: list[str] = []

    for operation in operations:
        modes = [GenerationMode.POSITIVE]
        if _has_invalid_cases(operation):
            modes.append(GenerationMode.NEGATIVE)
        for mode in modes:

            @hypothesis.settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                derandomize=True,
                suppress_health_check=list(hypothesis.HealthCheck),
                phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
            )
            @hypothesis.given(case=operation.as_strategy(generation_mode=mode), aim=st.booleans())
            def run(case: Any, aim: bool) -> None:
                if aim:
                    _point_at_world(case, world)
                cache.clear()  # the API's throttle
                calls.append(case.operation.label)
                with transaction.atomic():
                    try:
                        case.call_and_validate(
                            headers={"Authorization": f"Token {token}"},
                            checks=[not_a_server_error],
                        )
                    # schemathesis raises a FailureGroup, a BaseExceptionGroup.
                    except (Exception, BaseExceptionGroup) as error:
                        if _unavailable_as_documented(case.operation.label, str(error)):
                            return
                        failures.append(
                            f"{case.operation.label}: {case.as_curl_command()}\n{error}"
                        )
                    finally:
                        transaction.set_rollback(True)

            try:
                run()
            except hypothesis.errors.Unsatisfiable:
                # Should every invalid case drawn be rejected after all, the valid ones ran.
                assert mode == GenerationMode.NEGATIVE, operation.label
    assert set(calls) == {operation.label for operation in operations}
    assert not failures, f"{len(failures)} server errors:\n\n" + "\n\n".join(failures[:10])
