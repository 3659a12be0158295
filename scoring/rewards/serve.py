"""The reward worker: drain waiting requests, score the trajectories of all those that ask
the same scorer in one call of the loaded model (its length-sorted batches mix requests),
and answer each request on its own key.

The scorer travels with each request as plain data (:func:`scorer_wire`); the worker
builds its spec once per scorer id and revision and loads the model once per process
(``scoring.prm.adapters.scorer_load``, the workers' one model cache), so a training run's
thousands of requests load it once.
"""

# Django-free: the batching core and loop, run by `manage.py reward_worker`, the tests and
# the benchmark alike.
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from scoring.prm.base import ScorerError, ScorerSpec, StepInput, StepResult, TrajectoryInput
from scoring.prm.kinds import kind_get
from scoring.rewards.channel import RewardChannel

logger = logging.getLogger(__name__)


class Scores(Protocol):
    def score(self, trajectories: list[TrajectoryInput]) -> list[StepResult]: ...


def scorer_wire(spec: ScorerSpec, *, key: str) -> dict[str, Any]:
    """The scorer as a request carries it; ``key`` (its id and revision) names it in
    the worker's cache."""
    return {
        "key": key,
        "kind": spec.kind,
        "model_ref": spec.model_ref,
        "params": spec.params.to_dict(),
        "revision": spec.revision,
        "trust_remote_code": spec.trust_remote_code,
        "artifact": spec.artifact,
    }


def scorer_from_wire(wire: dict[str, Any]) -> ScorerSpec:
    return ScorerSpec(
        kind=wire["kind"],
        model_ref=wire["model_ref"],
        params=kind_get(wire["kind"]).parameters(wire["params"]),
        revision=wire["revision"],
        trust_remote_code=wire["trust_remote_code"],
        artifact=wire["artifact"],
    )


def trajectories_wire(inputs: Iterable[TrajectoryInput]) -> list[dict[str, Any]]:
    """The scorer's inputs as a request carries them: the task and each step's text,
    role and whether it is scored."""
    return [{"task": t.task, "steps": [[s.text, s.role, s.score] for s in t.steps]} for t in inputs]


class SpecCache:
    """Each scorer's spec, built once per id and revision."""

    def __init__(self) -> None:
        self._specs: dict[str, ScorerSpec] = {}

    def spec(self, wire: dict[str, Any]) -> ScorerSpec:
        key = wire["key"]
        if key not in self._specs:
            self._specs[key] = scorer_from_wire(wire)
        return self._specs[key]


def serve_batch(
    requests: list[dict[str, Any]],
    *,
    load: Callable[[dict[str, Any]], Scores],
    now: float | None = None,
) -> dict[str, dict[str, Any]]:
    """The answer to each request still within its deadline, by request id: ``steps``
    (per trajectory, a value per step, None where not scored) and ``truncated`` (scored
    steps whose context was cut), or ``error`` and its HTTP ``status``. Requests past
    their deadline are dropped: their callers have had their 504 already."""
    now = time.time() if now is None else now
    live = [r for r in requests if r["deadline"] > now]
    if len(live) < len(requests):
        logger.info("dropped %d requests past their deadline", len(requests) - len(live))
    groups: dict[str, list[dict[str, Any]]] = {}
    for request in live:
        groups.setdefault(request["scorer"]["key"], []).append(request)
    answers: dict[str, dict[str, Any]] = {}
    for group in groups.values():
        answers.update(_serve_group(group, load))
    return answers


def _serve_group(
    group: list[dict[str, Any]], load: Callable[[dict[str, Any]], Scores]
) -> dict[str, dict[str, Any]]:
    # Steps get keys unique over the whole group; each key says where its value goes.
    where: dict[int, tuple[str, int, int]] = {}
    steps: dict[str, list[list[float | None]]] = {}
    inputs: list[TrajectoryInput] = []
    for request in group:
        rows = steps[request["id"]] = []
        for t_index, trajectory in enumerate(request["trajectories"]):
            rows.append([None] * len(trajectory["steps"]))
            step_inputs = []
            for s_index, (text, role, scored) in enumerate(trajectory["steps"]):
                key = len(where)
                where[key] = (request["id"], t_index, s_index)
                step_inputs.append(StepInput(key, text, role, labelable=scored, score=scored))
            inputs.append(TrajectoryInput(len(inputs), trajectory["task"], tuple(step_inputs)))
    try:
        results = load(group[0]["scorer"]).score(inputs)
    except ScorerError as error:
        return {r["id"]: {"error": f"the scorer cannot run: {error}", "status": 400} for r in group}
    except Exception as error:  # the worker answers and goes on; the log has the trace
        logger.exception("scoring a batch of %d requests failed", len(group))
        return {
            r["id"]: {"error": f"the reward worker failed: {error!r}", "status": 500} for r in group
        }
    truncated = dict.fromkeys(steps, 0)
    for result in results:
        request_id, t_index, s_index = where[result.key]
        steps[request_id][t_index][s_index] = result.value
        truncated[request_id] += bool(result.truncated)
    return {
        request_id: {"steps": rows, "truncated": truncated[request_id]}
        for request_id, rows in steps.items()
    }


class RewardWorker:
    """The loop of ``manage.py reward_worker``: take up to ``max_requests`` waiting
    requests, serve them, answer, again."""

    def __init__(
        self,
        channel: RewardChannel,
        *,
        load: Callable[[dict[str, Any]], Scores],
        max_requests: int,
        block_s: float = 1.0,
    ) -> None:
        self.channel = channel
        self.load = load
        self.max_requests = max_requests
        self.block_s = block_s
        self.served = 0

    def serve_once(self) -> int:
        """Serve what waits (after up to ``block_s`` for something); the number of
        requests taken."""
        self.channel.beat()
        requests = self.channel.take(self.max_requests, block_s=self.block_s)
        if not requests:
            return 0
        for request_id, answer in serve_batch(requests, load=self.load).items():
            self.channel.answer(request_id, answer)
        self.served += len(requests)
        return len(requests)

    def run(self, *, stop: Callable[[], bool]) -> None:
        while not stop():
            self.serve_once()


def model_loader() -> Callable[[dict[str, Any]], Scores]:
    """Load a request's scorer through the workers' one model cache (imports torch)."""
    from scoring.prm import adapters

    specs = SpecCache()

    def load(wire: dict[str, Any]) -> Scores:
        return adapters.scorer_load(specs.spec(wire))

    return load
