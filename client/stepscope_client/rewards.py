"""Process rewards from a running Stepscope, in the shapes RL trainers call them.

verl: point ``custom_reward_function.path`` at this file (or a file that imports it) with
``name: compute_score`` (``NaiveRewardManager``: one call per sample) or
``name: compute_score_batch`` (``BatchRewardManager``), and say where Stepscope is either
in ``custom_reward_function.reward_kwargs`` (``url``, ``token``, ``project``, ``scorer``,
``aggregate``, ``separator``, ``store``, ``prompt_version``) or in the environment
(``STEPSCOPE_URL``, ``STEPSCOPE_TOKEN``, ``STEPSCOPE_PROJECT``, ``STEPSCOPE_SCORER``)::

    custom_reward_function:
      path: /path/to/stepscope_client/rewards.py
      name: compute_score

OpenRLHF: ``--remote_rm_url "$(python -c 'from stepscope_client.rewards import
openrlhf_url; print(openrlhf_url(URL, TOKEN, project="demo", scorer="prm"))')"``.

The scorer is any the project registered that the reward service runs: a PRM, a trained
head or an LLM judge (``prompt_version`` picks a judge's prompt version; its newest by
default). A response is cut into steps at ``separator`` (a blank line unless told); the task the
scorer sees is ``extra_info["question"]`` (or ``["prompt"]``) where the data has one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import lru_cache
from typing import Any
from urllib.parse import urlencode

import httpx

from stepscope_client.errors import StepscopeError

DEFAULT_SEPARATOR = "\n\n"
# Seconds to wait for a request's rewards before the server answers 504.
DEFAULT_TIMEOUT = 60.0


def openrlhf_url(
    base_url: str,
    token: str,
    *,
    project: str,
    scorer: str,
    aggregate: str = "min",
    separator: str | None = None,
    timeout: float | None = None,
    store: bool = False,
    prompt_version: int | None = None,
) -> str:
    """The URL to give OpenRLHF as ``--remote_rm_url``: it posts ``{"query": [...],
    "prompts": [...], "labels": [...]}`` there without headers, so the token rides in
    the URL (keep it out of shared logs)."""
    params: dict[str, str] = {"project": project, "scorer": scorer, "aggregate": aggregate}
    if separator is not None:
        params["separator"] = separator
    if timeout is not None:
        params["timeout"] = f"{timeout:g}"
    if store:
        params["store"] = "true"
    if prompt_version is not None:
        params["prompt_version"] = str(prompt_version)
    params["token"] = token
    return f"{base_url.rstrip('/')}/api/v1/rewards/openrlhf/?{urlencode(params)}"


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **options: Any,
) -> float:
    """verl's reward function: the reward of one response (its steps' aggregate)."""
    return compute_score_batch(
        data_sources=[data_source],
        solution_strs=[solution_str],
        ground_truths=[ground_truth],
        extra_infos=[extra_info],
        **options,
    )[0]


def compute_score_batch(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[dict[str, Any] | None] | None = None,
    **options: Any,
) -> list[float]:
    """verl's batched reward function: one reward per response, from one request."""
    config = _config(options)
    infos = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    records = [
        _record(index, source, solution, truth, info, config["separator"])
        for index, (source, solution, truth, info) in enumerate(
            zip(data_sources, solution_strs, ground_truths, infos, strict=True)
        )
    ]
    body = {
        "project": config["project"],
        "scorer": config["scorer"],
        "aggregate": config["aggregate"],
        "trajectories": records,
        "timeout": config["timeout"],
        "store": config["store"],
    }
    if config["prompt_version"] is not None:
        body["prompt_version"] = config["prompt_version"]
    http = _http(config["url"], config["token"], config["timeout"])
    response = http.post("rewards/", json=body)
    if response.status_code >= 400:
        try:
            errors: Any = response.json()
        except ValueError:
            errors = {"detail": response.text[:500]}
        raise StepscopeError(
            f"rewards refused: {errors}", status=response.status_code, errors=errors
        )
    return [
        float(item["reward"]) if item["reward"] is not None else 0.0
        for item in response.json()["rewards"]
    ]


def _config(options: dict[str, Any]) -> dict[str, Any]:
    known = {
        "url",
        "token",
        "project",
        "scorer",
        "aggregate",
        "separator",
        "timeout",
        "store",
        "prompt_version",
    }
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"unknown reward options {unknown}; expected some of {sorted(known)}")
    env = {
        "url": "STEPSCOPE_URL",
        "token": "STEPSCOPE_TOKEN",
        "project": "STEPSCOPE_PROJECT",
        "scorer": "STEPSCOPE_SCORER",
    }
    config: dict[str, Any] = {}
    for name, variable in env.items():
        value = options.get(name) or os.environ.get(variable)
        if not value:
            raise ValueError(f"say Stepscope's {name}: the {name}= option or {variable}")
        config[name] = value
    config["aggregate"] = options.get("aggregate", "min")
    config["separator"] = options.get("separator", DEFAULT_SEPARATOR)
    config["timeout"] = float(options.get("timeout", DEFAULT_TIMEOUT))
    config["store"] = bool(options.get("store", False))
    version = options.get("prompt_version")
    config["prompt_version"] = int(version) if version is not None else None
    return config


def _record(
    index: int,
    data_source: str,
    solution: str,
    ground_truth: Any,
    info: dict[str, Any] | None,
    separator: str,
) -> dict[str, Any]:
    info = info or {}
    task = info.get("question") or info.get("prompt") or ""
    pieces = [piece.strip() for piece in solution.split(separator)] if separator else [solution]
    steps = [{"content": piece} for piece in pieces if piece] or [{"content": solution}]
    sample = info.get("index", index)
    return {
        "id": f"{data_source}:{sample}",
        "task": task if isinstance(task, str) else str(task),
        "ground_truth": "" if ground_truth is None else str(ground_truth),
        "steps": steps,
    }


@lru_cache(maxsize=8)
def _http(url: str, token: str, timeout: float) -> httpx.Client:
    # One connection pool per server and token for the trainer's whole run.
    return httpx.Client(
        base_url=url.rstrip("/") + "/api/v1/",
        headers={"Authorization": f"Token {token}", "Accept": "application/json"},
        timeout=timeout + 10,
    )
