"""The credit methods as runs use them: their parameters, the inputs each needs, and the
CPU methods applied to a whole selection of stored steps at once (no Django).

The maths is :mod:`scoring.attribution`; this module turns a project's steps, read as
flat arrays (:class:`StepTable`, :class:`TrajectoryTable`), into the arrays a run stores:
one credit per step (:class:`Credits`). Every method here is whole-array numpy over all
selected trajectories at once; none loops over steps or trajectories in Python.

Which steps take part: the labelable ones (the steps scorers score and annotators label).
System prompts, user turns and tool outputs are context and get no credit.
"""

# Django-free: credit methods on arrays.
from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from metrics import agreement, montecarlo
from scoring import attribution

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

# An MC value under this means no rollout through the prefix succeeded: the first such
# step is where a rollout's chances collapsed (values only fall to 0 and stay there).
MC_COLLAPSED = 1e-9
# PRM first-error threshold when none is given (as ProcessBench uses).
PRM_THRESHOLD = 0.5

AGGREGATIONS = ("min", "product", "mean", "last")
REWARD_SOURCES = ("labels", "scorer", "none")


# --- Parameters ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    default: Any
    kind: type  # float, int, bool or str
    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    nullable: bool = False
    help: str = ""


@dataclass(frozen=True)
class MethodSpec:
    name: str
    summary: str
    # "required", "optional" or "" (not used).
    scorer: str = ""
    labels: bool = False  # takes --labels as step rewards
    model: bool = False  # runs the scorer's model, on its queue
    params: dict[str, Param] = field(default_factory=dict)


_GAMMA = Param(1.0, float, low=0.0, high=1.0, help="discount per step")
_HOW = Param("last", str, choices=AGGREGATIONS, help="how a trajectory's step values combine")
_EMPTY = Param(1.0, float, help="value of a trajectory with no steps kept")

METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in (
        MethodSpec(
            "prm-delta",
            "V_t - V_(t-1): how much the scorer's value moved at each step",
            scorer="required",
            params={"initial": Param(1.0, float, help="V before the first step")},
        ),
        MethodSpec(
            "aggregate",
            "the trajectory's score (min, product, mean or last step value) on every step",
            scorer="required",
            params={"how": Param("min", str, choices=AGGREGATIONS)},
        ),
        MethodSpec(
            "returns",
            "discounted return-to-go of step rewards (labels, scorer or none) plus the outcome",
            scorer="optional",
            labels=True,
            params={"gamma": _GAMMA},
        ),
        MethodSpec(
            "gae",
            "generalised advantage estimate with the scorer's values as V",
            scorer="required",
            labels=True,
            params={"gamma": _GAMMA, "lam": Param(0.95, float, low=0.0, high=1.0)},
        ),
        MethodSpec(
            "mc-prefix",
            "Monte Carlo value of each prefix over the task's rollouts; credit = child - parent",
            params={
                "prior_a": Param(1.0, float, low=1e-9),
                "prior_b": Param(1.0, float, low=1e-9),
                "level": Param(0.95, float, low=1e-9, high=1 - 1e-9),
                "posterior": Param(False, bool, help="Beta-binomial means instead of raw"),
            },
        ),
        MethodSpec(
            "group-relative",
            "GRPO or RLOO advantage of the outcome within the task's rollouts, on every step",
            params={
                "baseline": Param("grpo", str, choices=("grpo", "rloo")),
                "scale_by_std": Param(True, bool),
            },
        ),
        MethodSpec(
            "first-error",
            "the first step whose PRM value is under a threshold, or whose MC value collapses",
            scorer="optional",
            params={
                "source": Param("prm", str, choices=("prm", "mc")),
                "threshold": Param(None, float, nullable=True, low=0.0, high=1.0),
                "drop": Param(None, float, nullable=True, low=0.0, high=1.0),
            },
        ),
        MethodSpec(
            "leave-one-out",
            "score of the whole trajectory minus its score with the step removed",
            scorer="required",
            model=True,
            params={"how": _HOW, "empty": _EMPTY},
        ),
        MethodSpec(
            "shapley",
            "permutation-sampled Shapley values of the steps, or of the agents",
            scorer="required",
            model=True,
            params={
                "permutations": Param(32, int, low=1, high=10_000),
                "seed": Param(0, int),
                "players": Param("auto", str, choices=("auto", "steps", "agents")),
                "how": _HOW,
                "empty": _EMPTY,
            },
        ),
        MethodSpec(
            "token-saliency",
            "integrated gradients through the scorer for one step's tokens",
            scorer="required",
            model=True,
            params={"n_steps": Param(64, int, low=2, high=512)},
        ),
    )
}

CPU_METHODS = tuple(name for name, spec in METHODS.items() if not spec.model)
MODEL_METHODS = tuple(name for name, spec in METHODS.items() if spec.model)


def parameters_normalise(method: str, raw: dict[str, Any] | None) -> dict[str, Any]:
    """Every parameter of ``method``: its defaults overlaid with ``raw``, checked. Unknown
    names, wrong types and out-of-range values raise ValueError naming the parameter."""
    spec = METHODS.get(method)
    if spec is None:
        raise ValueError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
    out: dict[str, Any] = {}
    raw = dict(raw or {})
    for name in raw:
        if name not in spec.params:
            known = ", ".join(spec.params) or "none"
            raise ValueError(f"{method} has no parameter {name!r} (it takes: {known})")
    for name, param in spec.params.items():
        out[name] = _checked(name, param, raw.get(name, param.default))
    return out


def _checked(name: str, param: Param, value: Any) -> Any:
    if isinstance(value, str) and param.nullable and value.strip().lower() in ("", "none", "null"):
        value = None
    if value is None:
        if param.nullable or param.default is None:
            return None
        raise ValueError(f"parameter {name!r} needs a value")
    if param.kind is bool:
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            value = value.lower() in ("true", "1", "yes")
        if not isinstance(value, bool):
            raise ValueError(f"parameter {name!r} must be true or false")
        return value
    if param.kind in (int, float):
        if isinstance(value, bool):
            raise ValueError(f"parameter {name!r} must be a number")
        try:
            number = param.kind(value)
        except (TypeError, ValueError):
            raise ValueError(f"parameter {name!r} must be a number, got {value!r}") from None
        if param.kind is int and number != float(value):
            raise ValueError(f"parameter {name!r} must be a whole number")
        if isinstance(number, float) and not math.isfinite(number):
            raise ValueError(f"parameter {name!r} must be finite")
        if param.low is not None and number < param.low:
            raise ValueError(f"parameter {name!r} must be at least {param.low}")
        if param.high is not None and number > param.high:
            raise ValueError(f"parameter {name!r} must be at most {param.high}")
        return number
    value = str(value)
    if param.choices and value not in param.choices:
        raise ValueError(f"parameter {name!r} must be one of {', '.join(param.choices)}")
    return value


# --- Inputs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepTable:
    """The labelable steps of the selected trajectories, in trajectory id then index
    order. ``score`` and ``reward`` are NaN where the scorer has no score or the label
    source no label; ``node`` is a 64-bit digest of the step's prefix hash."""

    trajectory: IntArray
    step: IntArray
    score: FloatArray
    reward: FloatArray
    node: IntArray

    @property
    def size(self) -> int:
        return int(self.step.size)

    def subset(self, mask: NDArray[np.bool_]) -> StepTable:
        return StepTable(
            self.trajectory[mask],
            self.step[mask],
            self.score[mask],
            self.reward[mask],
            self.node[mask],
        )


@dataclass(frozen=True)
class TrajectoryTable:
    """The selected trajectories, by id ascending: the outcome reward and success (NaN
    when unknown) and a task group code (rollouts of one ``task_key``)."""

    trajectory: IntArray
    outcome_reward: FloatArray
    success: FloatArray
    group: IntArray

    def rows_of(self, trajectory_ids: IntArray) -> IntArray:
        rows = np.searchsorted(self.trajectory, trajectory_ids)
        if rows.size and (
            np.any(rows >= self.trajectory.size) or np.any(self.trajectory[rows] != trajectory_ids)
        ):
            raise ValueError("steps of a trajectory that is not in the trajectory table")
        return rows.astype(np.int64)

    def outcome(self) -> FloatArray:
        """The outcome reward, else success as 1/0, else NaN."""
        return np.where(np.isnan(self.outcome_reward), self.success, self.outcome_reward)

    def mc_outcome(self) -> FloatArray:
        """An outcome in [0, 1] for Monte Carlo values: success as 1/0, else a reward
        within [0, 1], else NaN (left out)."""
        reward = np.where(
            (self.outcome_reward >= 0) & (self.outcome_reward <= 1), self.outcome_reward, np.nan
        )
        return np.where(np.isnan(self.success), reward, self.success)


@dataclass
class Credits:
    """What a run stores: a credit per step, the level it moved from (or None), and
    the numbers it reports."""

    step: IntArray
    value: FloatArray
    level: FloatArray | None = None
    metrics: dict[str, Any] = field(default_factory=dict)


def segments(trajectory: IntArray) -> tuple[IntArray, IntArray]:
    """CSR offsets of the runs of equal trajectory ids, and the id of each run."""
    if not trajectory.size:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    starts = np.concatenate(([0], np.flatnonzero(np.diff(trajectory)) + 1)).astype(np.int64)
    offsets = np.append(starts, trajectory.size).astype(np.int64)
    return offsets, trajectory[starts]


# --- The CPU methods -----------------------------------------------------------------------


def compute(
    method: str,
    params: dict[str, Any],
    steps: StepTable,
    trajectories: TrajectoryTable,
    *,
    rewards: str = "none",
) -> Credits:
    """Run a CPU method over every selected trajectory at once. ``rewards`` says where
    dense step rewards come from (``labels``, ``scorer`` or ``none``) for the methods that
    take them. ``metrics["math_s"]`` is the time spent here: the maths alone."""
    runner = _RUNNERS.get(method)
    if runner is None:
        raise ValueError(f"{method!r} is not a CPU method")
    if rewards not in REWARD_SOURCES:
        raise ValueError(f"rewards come from one of {', '.join(REWARD_SOURCES)}")
    start = time.perf_counter()
    credits = runner(params, steps, trajectories, rewards)
    credits.metrics["math_s"] = round(time.perf_counter() - start, 4)
    credits.metrics["credited_steps"] = int(credits.step.size)
    return credits


def _scored(steps: StepTable) -> tuple[StepTable, IntArray, IntArray]:
    scored = steps.subset(~np.isnan(steps.score))
    offsets, ids = segments(scored.trajectory)
    return scored, offsets, ids


def _prm_delta(
    params: dict[str, Any], steps: StepTable, _: TrajectoryTable, _rewards: str
) -> Credits:
    scored, offsets, ids = _scored(steps)
    value = attribution.prm_delta(scored.score, offsets, initial=params["initial"])
    return Credits(scored.step, value, scored.score, {"trajectories": int(ids.size)})


def _aggregate(
    params: dict[str, Any], steps: StepTable, table: TrajectoryTable, _rewards: str
) -> Credits:
    scored, offsets, ids = _scored(steps)
    per_trajectory = attribution.aggregate(scored.score, offsets, how=params["how"])
    value = attribution.spread_over_steps(per_trajectory, offsets)
    success = table.success[table.rows_of(ids)]
    known = ~np.isnan(success)
    report: dict[str, Any] = {"trajectories": int(ids.size)}
    if known.any():
        auroc = agreement.auroc(per_trajectory[known], success[known] > 0.5)
        report["auroc_vs_success"] = None if math.isnan(auroc) else round(auroc, 4)
        for name, outcome in (("mean_if_success", True), ("mean_if_failure", False)):
            chosen = per_trajectory[known][(success[known] > 0.5) == outcome]
            report[name] = round(float(chosen.mean()), 4) if chosen.size else None
    return Credits(scored.step, value, None, report)


def _outcomes(steps_trajectory_ids: IntArray, table: TrajectoryTable) -> tuple[FloatArray, int]:
    outcome = table.outcome()[table.rows_of(steps_trajectory_ids)]
    unknown = int(np.isnan(outcome).sum())
    return np.nan_to_num(outcome, nan=0.0), unknown


def _dense_rewards(steps: StepTable, source: str) -> FloatArray:
    if source == "labels":
        return np.nan_to_num(steps.reward, nan=0.0)
    if source == "scorer":
        return np.nan_to_num(steps.score, nan=0.0)
    return np.zeros(steps.size)


def _returns(
    params: dict[str, Any], steps: StepTable, table: TrajectoryTable, source: str
) -> Credits:
    offsets, ids = segments(steps.trajectory)
    outcome, unknown = _outcomes(ids, table)
    value = attribution.discounted_returns(
        _dense_rewards(steps, source), offsets, outcome=outcome, gamma=params["gamma"]
    )
    report = {"trajectories": int(ids.size), "rewards": source, "unknown_outcome": unknown}
    return Credits(steps.step, value, None, report)


def _gae(params: dict[str, Any], steps: StepTable, table: TrajectoryTable, source: str) -> Credits:
    # The scorer gives the values here, so only labels can give step rewards.
    scored, offsets, ids = _scored(steps)
    outcome, unknown = _outcomes(ids, table)
    value = attribution.gae(
        _dense_rewards(scored, "labels" if source == "labels" else "none"),
        scored.score,
        offsets,
        outcome=outcome,
        gamma=params["gamma"],
        lam=params["lam"],
    )
    report = {"trajectories": int(ids.size), "rewards": source, "unknown_outcome": unknown}
    return Credits(scored.step, value, scored.score, report)


@dataclass(frozen=True)
class McValues:
    """Per-step Monte Carlo values over the steps of trajectories with a usable outcome."""

    steps: StepTable
    offsets: IntArray
    value: FloatArray
    advantage: FloatArray
    root: FloatArray  # per trajectory: its task's mean outcome (or posterior mean)
    nodes: int
    groups: int


def mc_values(
    steps: StepTable,
    table: TrajectoryTable,
    *,
    prior: tuple[float, float] = (1.0, 1.0),
    level: float = 0.95,
    posterior: bool = False,
) -> McValues:
    """Monte Carlo values of every step's prefix, all tasks in one
    :func:`montecarlo.mc_prefix` call.

    Nodes are keyed by (task group, prefix digest), so rollouts of different tasks never
    merge; the advantage of a first step is taken against its own task's mean outcome
    (the tree's root), not the mean over all tasks.
    """
    outcome_all = table.mc_outcome()
    usable = ~np.isnan(outcome_all[table.rows_of(steps.trajectory)])
    kept = steps.subset(usable)
    offsets, ids = segments(kept.trajectory)
    if not ids.size:
        empty = np.zeros(0)
        return McValues(kept, offsets, empty, empty, empty, 0, 0)
    rows = table.rows_of(ids)
    outcome = outcome_all[rows]
    group = table.group[rows]
    step_group = np.repeat(group, np.diff(offsets))
    # Dense codes of (group, node) pairs; their decimal text is the key mc_prefix groups by.
    node_values, node_code = np.unique(kept.node, return_inverse=True)
    pair = step_group * np.int64(node_values.size) + node_code.reshape(-1)
    _, codes = np.unique(pair, return_inverse=True)
    codes = codes.reshape(-1).astype(np.int64)
    # Short decimal keys as plain lists of str: what mc_prefix chains and sorts fastest.
    keys: list[str] = codes.astype(f"U{len(str(int(codes.max())))}").tolist()
    bounds = offsets.tolist()
    rollouts = [keys[start:end] for start, end in itertools.pairwise(bounds)]
    tree = montecarlo.mc_prefix(rollouts, outcome, prior=prior, level=level)

    groups, group_code = np.unique(group, return_inverse=True)
    counts = np.bincount(group_code).astype(np.float64)
    sums = np.bincount(group_code, weights=outcome)
    a, b = prior
    root = (a + sums) / (a + b + counts) if posterior else sums / counts
    node_value = tree.posterior_mean if posterior else tree.value
    # The task root of each node, from any step that maps to it.
    node_root = np.empty(node_value.size)
    node_root[tree.step_node] = np.repeat(root[group_code], np.diff(offsets))
    has_parent = tree.parent >= 0
    parent_value = np.where(has_parent, node_value[np.where(has_parent, tree.parent, 0)], node_root)
    advantage = node_value - parent_value
    return McValues(
        steps=kept,
        offsets=offsets,
        value=node_value[tree.step_node],
        advantage=advantage[tree.step_node],
        root=root[group_code],
        nodes=int(node_value.size),
        groups=int(groups.size),
    )


def _mc_prefix(
    params: dict[str, Any], steps: StepTable, table: TrajectoryTable, _rewards: str
) -> Credits:
    mc = mc_values(
        steps,
        table,
        prior=(params["prior_a"], params["prior_b"]),
        level=params["level"],
        posterior=params["posterior"],
    )
    report = {
        "trajectories": int(mc.offsets.size - 1),
        "tasks": mc.groups,
        "nodes": mc.nodes,
        "left_out_steps": steps.size - mc.steps.size,
    }
    return Credits(mc.steps.step, mc.advantage, mc.value, report)


def _group_relative(
    params: dict[str, Any], steps: StepTable, table: TrajectoryTable, _rewards: str
) -> Credits:
    outcome_all = table.outcome()
    known = ~np.isnan(outcome_all[table.rows_of(steps.trajectory)])
    kept = steps.subset(known)
    offsets, ids = segments(kept.trajectory)
    rows = table.rows_of(ids)
    rewards, groups = outcome_all[rows], table.group[rows]
    if params["baseline"] == "rloo":
        per_trajectory = attribution.rloo_advantages(rewards, groups)
    else:
        per_trajectory = attribution.grpo_advantages(
            rewards, groups, scale_by_std=params["scale_by_std"]
        )
    value = attribution.spread_over_steps(per_trajectory, offsets)
    report = {
        "trajectories": int(ids.size),
        "tasks": int(np.unique(groups).size),
        "left_out_steps": steps.size - kept.size,
    }
    return Credits(kept.step, value, None, report)


def first_error_prm(
    values: FloatArray,
    offsets: IntArray,
    *,
    threshold: float | None = None,
    drop: float | None = None,
) -> IntArray:
    """Per trajectory, the first step whose PRM value is under ``threshold`` (0.5 by
    default) or fell by more than ``drop``; -1 where none is."""
    return attribution.first_error(
        values, offsets, threshold=PRM_THRESHOLD if threshold is None else threshold, drop=drop
    )


def first_error_mc(
    values: FloatArray,
    offsets: IntArray,
    root: FloatArray,
    *,
    threshold: float | None = None,
    drop: float | None = None,
) -> IntArray:
    """Per trajectory, the first step whose MC value collapsed: no rollout through it
    succeeded (or under ``threshold``), or it fell by more than ``drop`` from the step
    before (the task's mean outcome before the first step). -1 for tasks that never
    succeed, where there is no collapse to find."""
    found = attribution.first_error(
        values,
        offsets,
        threshold=MC_COLLAPSED if threshold is None else threshold,
        drop=drop,
        initial=root,
    )
    return np.where(root > MC_COLLAPSED, found, -1)


def _first_error(
    params: dict[str, Any], steps: StepTable, table: TrajectoryTable, _rewards: str
) -> Credits:
    if params["source"] == "mc":
        mc = mc_values(steps, table)
        kept, offsets, values = mc.steps, mc.offsets, mc.value
        found = first_error_mc(
            values, offsets, mc.root, threshold=params["threshold"], drop=params["drop"]
        )
    else:
        kept, offsets, _ = _scored(steps)
        values = kept.score
        found = first_error_prm(values, offsets, threshold=params["threshold"], drop=params["drop"])
    flagged = found >= 0
    positions = offsets[:-1][flagged] + found[flagged]
    report = {"trajectories": int(offsets.size - 1), "flagged": int(flagged.sum())}
    # -1 on the step where the error begins; its value that crossed the line as the level.
    return Credits(kept.step[positions], np.full(positions.size, -1.0), values[positions], report)


_RUNNERS: dict[str, Callable[[dict[str, Any], StepTable, TrajectoryTable, str], Credits]] = {
    "prm-delta": _prm_delta,
    "aggregate": _aggregate,
    "returns": _returns,
    "gae": _gae,
    "mc-prefix": _mc_prefix,
    "group-relative": _group_relative,
    "first-error": _first_error,
}
