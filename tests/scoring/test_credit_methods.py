"""The Django-free parts of attribution runs: method parameters, the CPU methods on flat
tables, binary COPY encoding, leave-one-out and Shapley with batched coalition scoring,
and token saliency's completeness on tiny models of each PRM shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from scoring import copyio, methods
from scoring.prm import (
    ScorerSpec,
    StepInput,
    StepResult,
    TrajectoryInput,
    coalitions,
    params_for_kind,
)
from tests.scoring.conftest import TinyModels
from tests.test_layering import django_modules_loaded_by

NEW_DJANGO_FREE = (
    "scoring.methods",
    "scoring.copyio",
    "scoring.prm.coalitions",
    "scoring.prm.saliency",
)


@pytest.mark.parametrize("module", NEW_DJANGO_FREE)
def test_attribution_computation_does_not_import_django(module: str) -> None:
    assert django_modules_loaded_by(f"import {module}") == []


# --- Parameters ----------------------------------------------------------------------------


def test_parameters_get_defaults_and_are_checked() -> None:
    assert methods.parameters_normalise("gae", {"lam": "0.5"}) == {"gamma": 1.0, "lam": 0.5}
    assert methods.parameters_normalise("first-error", {"threshold": "none"}) == {
        "source": "prm",
        "threshold": None,
        "drop": None,
    }
    assert methods.parameters_normalise("mc-prefix", {"posterior": "true"})["posterior"] is True
    for method, raw, message in (
        ("gae", {"gamma": 1.5}, "at most 1"),
        ("shapley", {"permutations": 2.5}, "whole number"),
        ("aggregate", {"how": "median"}, "one of min"),
        ("returns", {"lam": 0.5}, "no parameter 'lam'"),
        ("group-relative", {"scale_by_std": "maybe"}, "true or false"),
        ("returns", {"gamma": float("nan")}, "finite"),
    ):
        with pytest.raises(ValueError, match=message):
            methods.parameters_normalise(method, raw)


# --- CPU methods on tables ------------------------------------------------------------------


def table(
    lengths: list[int], scores: list[float], outcomes: list[float], groups: list[int]
) -> tuple[methods.StepTable, methods.TrajectoryTable]:
    ids = np.arange(1, len(lengths) + 1, dtype=np.int64)
    trajectory = np.repeat(ids, lengths)
    n = trajectory.size
    steps = methods.StepTable(
        trajectory,
        np.arange(100, 100 + n, dtype=np.int64),
        np.asarray(scores, dtype=float),
        np.full(n, np.nan),
        np.arange(n, dtype=np.int64),
    )
    outcome = np.asarray(outcomes, dtype=float)
    return steps, methods.TrajectoryTable(ids, outcome, outcome, np.asarray(groups))


def test_cpu_methods_report_the_time_of_the_maths() -> None:
    steps, trajectories = table([2, 3], [0.9, 0.2, 0.8, 0.7, 0.6], [0.0, 1.0], [1, 1])
    credits = methods.compute("prm-delta", {"initial": 1.0}, steps, trajectories)
    assert credits.value == pytest.approx([-0.1, -0.7, -0.2, -0.1, -0.1])
    assert credits.metrics["math_s"] >= 0 and credits.metrics["credited_steps"] == 5
    with pytest.raises(ValueError, match="not a CPU method"):
        methods.compute("shapley", {}, steps, trajectories)


def test_mc_first_error_needs_a_task_that_ever_succeeds() -> None:
    values = np.array([0.5, 0.0, 0.0, 0.0])
    offsets = np.array([0, 2, 4])
    found = methods.first_error_mc(values, offsets, np.array([0.5, 0.0]))
    assert found.tolist() == [1, -1]


# --- Binary COPY ---------------------------------------------------------------------------


def test_binary_copy_encodes_and_decodes_fixed_width_rows() -> None:
    ids = np.array([3, 1, 2], dtype=np.int64)
    values = np.array([0.5, -2.0, 1e-300])
    data = copyio.encode([("int8", ids), ("float8", values)], 3)
    assert data.startswith(copyio.SIGNATURE) and data.endswith(b"\xff\xff")
    got_ids, got_values = copyio.decode(data, ["int8", "float8"])
    assert got_ids.tolist() == [3, 1, 2] and got_values.tolist() == values.tolist()
    with pytest.raises(ValueError, match="not PostgreSQL"):
        copyio.decode(b"nonsense", ["int8"])


# --- Leave-one-out and Shapley with a scorer -------------------------------------------------


class AdditiveScorer:
    """A fake scorer whose value after a step is the sum of the weights of the labelable
    steps kept so far (each step's text is its weight), so Shapley values are the weights."""

    def __init__(self) -> None:
        self.calls = 0
        self.sequences = 0

    def score(self, trajectories: list[TrajectoryInput]) -> list[StepResult]:
        self.calls += 1
        out = []
        for trajectory in trajectories:
            self.sequences += 1
            total = 0.0
            for step in trajectory.steps:
                if step.labelable:
                    total += float(step.text)
                if step.score:
                    out.append(StepResult(step.key, total))
        return out


def additive_trajectory(
    weights: list[float], labelable: list[bool] | None = None
) -> TrajectoryInput:
    labelable = labelable or [True] * len(weights)
    return TrajectoryInput(
        1,
        "task",
        tuple(
            StepInput(10 + i, str(w), labelable=lab, score=lab)
            for i, (w, lab) in enumerate(zip(weights, labelable, strict=True))
        ),
    )


def test_shapley_of_an_additive_scorer_is_each_steps_weight() -> None:
    scorer = AdditiveScorer()
    trajectory = additive_trajectory([0.5, -0.25, 2.0, 99.0], [True, True, True, False])
    jobs = [
        coalitions.shapley_job(trajectory, permutations=2, seed=0),  # sampled: 2**3 > 2 * 3
        coalitions.shapley_job(trajectory, permutations=100, seed=0),  # exact
    ]
    sampled, exact = coalitions.run_jobs(scorer, jobs, how="last", empty=0.0)
    assert scorer.calls == 1  # every coalition of both jobs in one batch
    for result in (sampled, exact):
        assert [c.key for c in result.credits] == [10, 11, 12]  # the context step has none
        assert [c.value for c in result.credits] == pytest.approx([0.5, -0.25, 2.0])
        assert result.report["efficiency_gap"] < 1e-12
        assert result.report["v_all"] == pytest.approx(2.25)
        assert result.report["v_empty"] == 0.0
    assert not sampled.report["exact"] and exact.report["exact"]


def test_leave_one_out_of_an_additive_scorer() -> None:
    [result] = coalitions.run_jobs(
        AdditiveScorer(), [coalitions.leave_one_out_job(additive_trajectory([1.0, 2.0, 4.0]))]
    )
    assert [c.value for c in result.credits] == pytest.approx([1.0, 2.0, 4.0])


def test_agent_shapley_shares_an_agents_value_among_its_steps() -> None:
    trajectory = additive_trajectory([1.0, 3.0, 5.0, 7.0])
    job = coalitions.shapley_job(trajectory, permutations=10, seed=0, agents=["a", "b", "a", ""])
    [result] = coalitions.run_jobs(AdditiveScorer(), [job], how="last", empty=0.0)
    by_key = {c.key: c for c in result.credits}
    # a owns 1 + 5, b owns 3; the unowned step (7) is kept in every coalition.
    assert by_key[10].detail == {"agent": "a", "agent_value": pytest.approx(6.0)}
    assert by_key[10].value == by_key[12].value == pytest.approx(3.0)
    assert by_key[11].value == pytest.approx(3.0) and 13 not in by_key
    assert result.report["over"] == "agents" and result.report["efficiency_gap"] < 1e-12


def test_a_coalition_without_labelable_steps_has_the_empty_value() -> None:
    values = coalitions.evaluate(
        AdditiveScorer(),
        [
            (additive_trajectory([1.0, 2.0]), frozenset()),
            (additive_trajectory([1.0, 2.0]), frozenset({1})),
        ],
        how="min",
        empty=0.75,
    )
    assert values == [0.75, 2.0]


# --- Token saliency ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["token-classification", "step-tag-lm", "sequence-classifier"])
def test_token_saliency_is_complete(tiny_models: TinyModels, kind: str) -> None:
    """Integrated gradients' completeness: the tokens' credits add up to the score minus
    the score with the step at the baseline, within the integral's error."""
    from scoring.prm import adapters
    from scoring.prm.saliency import token_saliency

    paths: dict[str, Path] = {
        "token-classification": tiny_models.token_classifier,
        "step-tag-lm": tiny_models.step_tag_lm,
        "sequence-classifier": tiny_models.sequence_classifier,
    }
    scorer = adapters.scorer_build(
        ScorerSpec(kind=kind, model_ref=str(paths[kind]), params=params_for_kind(kind, {}))
    )
    step = StepInput(11, "So 16 - 3 = 13 eggs remain.")
    trajectory = TrajectoryInput(1, "What is 16 - 3?", (StepInput(10, "Janet has 16 eggs."), step))
    saliency = token_saliency(scorer, trajectory, n_steps=256)
    assert "".join(saliency.tokens) == step.text
    [expected] = [r for r in scorer.score([trajectory]) if r.key == 11]
    assert saliency.score == pytest.approx(expected.value, abs=1e-5)
    difference = saliency.score - saliency.baseline_score
    assert sum(saliency.attributions) == pytest.approx(difference, abs=1e-3)
    assert abs(saliency.delta) < 1e-3
    report: dict[str, Any] = saliency.to_dict()
    assert len(report["tokens"]) == len(saliency.tokens) and not report["truncated"]


def test_token_saliency_cuts_long_prefixes_from_the_left(tiny_models: TinyModels) -> None:
    from scoring.prm import adapters
    from scoring.prm.saliency import token_saliency

    kind = "token-classification"
    scorer = adapters.scorer_build(
        ScorerSpec(
            kind=kind,
            model_ref=str(tiny_models.token_classifier),
            params=params_for_kind(kind, {"max_length": 24}),
        )
    )
    long_context = StepInput(10, "Janet has sixteen eggs and eats three of them. " * 5)
    trajectory = TrajectoryInput(1, "task", (long_context, StepInput(11, "16 - 3 = 13")))
    saliency = token_saliency(scorer, trajectory, n_steps=64)
    assert "".join(saliency.tokens) == "16 - 3 = 13" and not saliency.truncated
