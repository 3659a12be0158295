"""Rollout fixtures: a tiny random causal LM saved once per session and a policy that
uses it; a scripted policy whose continuations the test decides (so outcomes are known);
arithmetic trajectories with a planted first error; Celery workers this module may kill."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rollouts.generation import EOS, Cancelled, Continuation, PolicySpec, Request
from rollouts.models import Policy
from tests.factories import trajectory_with_steps
from tests.scoring.conftest import Workers
from trajectories.models import Project, Trajectory

# Small enough that a random model's continuations stay short and fast.
TINY_PARAMETERS = {
    "max_new_tokens": 6,
    "batch_size": 8,
    "max_length": 256,
    "step_join": "\n",
    "cpu_threads": 1,
}


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from scoring.prm import tiny

    return tiny.save_step_tag_lm(tmp_path_factory.mktemp("tiny-policy") / "lm")


@pytest.fixture
def make_policy(tiny_policy_dir: Path) -> Callable[..., Policy]:
    def make(name: str = "tiny", *, project: Project | None = None, **fields: Any) -> Policy:
        parameters = {**TINY_PARAMETERS, **fields.pop("parameters", {})}
        return Policy.objects.create(
            name=name,
            project=project,
            model_ref=str(tiny_policy_dir),
            parameters=parameters,
            **fields,
        )

    return make


@dataclass
class ScriptedGenerator:
    """Stands in for a loaded policy: ``script(request, sample)`` gives each
    continuation's text; every request it was handed is kept for the test to inspect."""

    script: Callable[[Request, int], str]
    requests: list[Request] = field(default_factory=list)
    spec: PolicySpec = field(default_factory=lambda: PolicySpec(model_ref="scripted"))

    def generate(
        self, requests: list[Request], *, should_stop: Callable[[], bool] | None = None
    ) -> list[Continuation]:
        out = []
        for request in requests:
            # As the real generator asks between batches.
            if should_stop is not None and should_stop():
                raise Cancelled
            self.requests.append(request)
            for sample in range(request.first_sample, request.first_sample + request.samples):
                text = self.script(request, sample)
                steps = tuple(s.strip() for s in text.split("\n") if s.strip())
                out.append(
                    Continuation(
                        key=request.key,
                        sample=sample,
                        text=text,
                        steps=steps,
                        finish_reason=EOS,
                        new_tokens=len(text.split()),
                        prompt_tokens=10,
                    )
                )
        return out


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Callable[..., ScriptedGenerator]:
    """``scripted(script)`` makes every policy generate through ``script``."""
    from rollouts.generation import generator

    def install(script: Callable[[Request, int], str]) -> ScriptedGenerator:
        fake = ScriptedGenerator(script)
        monkeypatch.setattr(generator, "generator_load", lambda spec: fake)
        return fake

    return install


def arithmetic(project: Project, *, slip: int | None, length: int = 6, **fields: Any) -> Trajectory:
    """A chain ``x -> x + 1`` from 1, its answer ``length + 1``; from step ``slip`` on the
    numbers are off by 10, as a slip carried forward. Ground truth set, outcome stored."""
    value = 1
    steps = []
    for index in range(length):
        result = value + 1 + (10 if index == slip else 0)
        steps.append(f"{value} + 1 = {result}")
        value = result
    steps.append(f"The answer is {value}.")
    return trajectory_with_steps(
        project, steps, ground_truth=str(length + 1), success=slip is None, **fields
    )


def continue_correctly(request: Request, sample: int) -> str:
    """A perfect policy for :func:`arithmetic`: carries the last number on, +1 per step,
    to the end of the chain (6 steps)."""
    numbers = [s.content.split("= ")[-1] for s in request.steps if "=" in s.content]
    value = int(numbers[-1]) if numbers else 1
    done = len(numbers)
    lines = []
    for _ in range(done, 6):
        lines.append(f"{value} + 1 = {value + 1}")
        value += 1
    lines.append(f"The answer is {value}.")
    return "\n".join(lines)


@pytest.fixture
def workers(transactional_db: None) -> Iterator[Workers]:
    from django.db import connection

    started = Workers(connection.settings_dict["NAME"])
    try:
        yield started
    finally:
        started.stop_all()
