"""The reward worker: drain waiting requests, score the trajectories of all those that ask
the same scorer in one call of the loaded model (its length-sorted batches mix requests),
and answer each request on its own key.

The scorer travels with each request as plain data (:func:`scorer_wire`); the worker
builds its spec once per scorer id and revision and loads the model once per process
(``scoring.prm.adapters.scorer_load``, the workers' one model cache), so a training run's
thousands of requests load it once.

An LLM judge travels the same way (:func:`judge_wire`: its model, parameters and the
prompt version's text); its requests of one pass are asked together through the judge's
backend (a remote endpoint ``concurrency`` calls at a time, a local model in batches,
kept loaded as a PRM is) and read as a judge run reads them (``scoring/judges/scorer.py``).
An endpoint that fails is a 502 naming the judge.
"""

# Django-free: the batching core and loop, run by `manage.py reward_worker`, the tests and
# the benchmark alike.
from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from scoring.judges.backend import JudgeSpec
from scoring.judges.config import JudgeError
from scoring.judges.modes import Prompt
from scoring.judges.scorer import JudgeStepScorer, PastDeadline
from scoring.prm.base import ScorerError, ScorerSpec, StepInput, StepResult, TrajectoryInput
from scoring.prm.kinds import LLM_JUDGE, kind_get
from scoring.rewards.channel import RewardChannel

logger = logging.getLogger(__name__)


class Scores(Protocol):
    def score(self, trajectories: list[TrajectoryInput]) -> list[StepResult]: ...


# The scorer a request carries (its wire) made ready to score, given the latest deadline
# of the requests it serves in this pass (a judge stops asking past it).
Load = Callable[[dict[str, Any], float], Scores]


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


def judge_wire(spec: JudgeSpec, prompt: Prompt, *, key: str, name: str) -> dict[str, Any]:
    """A judge as a request carries it: ``key`` names the judge, its prompt version and
    parameters; ``name`` is what an error says."""
    return {
        "key": key,
        "kind": LLM_JUDGE,
        "name": name,
        "model_ref": spec.model_ref,
        "params": spec.params.to_dict(),
        "revision": spec.revision,
        "trust_remote_code": spec.trust_remote_code,
        "prompt": {"system": prompt.system, "template": prompt.template},
    }


def judge_from_wire(wire: dict[str, Any], *, deadline: float) -> JudgeStepScorer:
    from scoring.judges.config import judge_params

    spec = JudgeSpec(
        model_ref=wire["model_ref"],
        params=judge_params(wire["params"]),
        revision=wire["revision"],
        trust_remote_code=wire["trust_remote_code"],
    )
    prompt = Prompt(wire["prompt"]["system"], wire["prompt"]["template"])
    return JudgeStepScorer(spec, prompt, deadline=deadline)


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
    load: Load,
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


def _serve_group(group: list[dict[str, Any]], load: Load) -> dict[str, dict[str, Any]]:
    # Steps get keys unique over the whole group; each key says where its value goes.
    where: dict[int, tuple[str, int, int]] = {}
    trajectory_where: list[tuple[str, int]] = []
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
            trajectory_where.append((request["id"], t_index))
    wire = group[0]["scorer"]
    try:
        results = load(wire, max(r["deadline"] for r in group)).score(inputs)
    except ScorerError as error:
        return {r["id"]: {"error": f"the scorer cannot run: {error}", "status": 400} for r in group}
    except PastDeadline:
        logger.info("a judge was still asked past the deadline of %d requests", len(group))
        return {}  # their callers have had their 504 already
    except JudgeError as error:
        # The endpoint's failure (unreachable, a refused key, no such model, errors past
        # the retries) or the worker's (the key's variable unset): the trainer must see
        # it, never a reward made of the steps that were answered.
        name = wire.get("name", "")
        return {
            r["id"]: {
                "error": f"the judge {name!r} failed: "
                + _judge_error_placed(str(error), r["id"], where, trajectory_where),
                "status": 502,
            }
            for r in group
        }
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


# How a judge's error names what it asked about (``scoring.judges.modes.describe``), by
# the keys the worker gave the pass's steps and trajectories.
_DESCRIBED = re.compile(r"\b(?:step (\d+) of )?trajectory (\d+)\b")


def _judge_error_placed(
    message: str,
    request_id: str,
    where: dict[int, tuple[str, int, int]],
    trajectory_where: list[tuple[str, int]],
) -> str:
    """``message`` with the worker's keys turned into the caller's positions
    (``trajectories.1 step 2``), or, where the judge failed on another request served in
    the same pass, saying so."""

    def place(match: re.Match[str]) -> str:
        step, trajectory = match.group(1), int(match.group(2))
        if step is not None and int(step) in where:
            owner, t_index, s_index = where[int(step)]
            if owner == request_id:
                return f"trajectories.{t_index} step {s_index}"
        elif step is None and trajectory < len(trajectory_where):
            owner, t_index = trajectory_where[trajectory]
            if owner == request_id:
                return f"trajectories.{t_index}"
        return "a trajectory of another request asked in the same pass"

    return _DESCRIBED.sub(place, message)


class RewardWorker:
    """The loop of ``manage.py reward_worker``: take up to ``max_requests`` waiting
    requests, serve them, answer, again."""

    def __init__(
        self,
        channel: RewardChannel,
        *,
        load: Load,
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


def model_loader() -> Load:
    """Load a request's scorer through the workers' one model cache (imports torch for
    a model scorer or a local judge)."""
    specs = SpecCache()

    def load(wire: dict[str, Any], deadline: float) -> Scores:
        if wire["kind"] == LLM_JUDGE:
            return judge_from_wire(wire, deadline=deadline)
        from scoring.prm import adapters

        return adapters.scorer_load(specs.spec(wire))

    return load
