"""What a training loop asks of Stepscope beyond pushing data: make a project, register a
scorer or judge, start scoring, judge, attribution and rollout runs, train the project's
head, and read scores, credits and Monte Carlo values back. Each call is one API route
(docs/api.md); refusals raise ``StepscopeError`` with the status and the field errors."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from stepscope_client.jobs import Job


class TrainingCalls:
    """Mixed into ``Client``."""

    if TYPE_CHECKING:

        def _request(self, method: str, path: str, **kwargs: Any) -> Any: ...

    # Projects

    def create_project(
        self, slug: str, name: str | None = None, *, guidelines: str = ""
    ) -> dict[str, Any]:
        """Make a project (you become its admin); ``name`` defaults to the slug. A taken
        slug is a 400 naming ``slug``."""
        body = {"slug": slug, "name": name or slug, "guidelines": guidelines}
        return dict(self._request("POST", "projects/", json=body))

    def projects(self) -> list[dict[str, Any]]:
        """The projects you are a member of."""
        return list(self._pages("projects/", {}))

    # Scorers and runs

    def create_scorer(
        self,
        project: str,
        name: str,
        kind: str,
        *,
        model_ref: str = "",
        parameters: Mapping[str, Any] | None = None,
        prompt: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """Register a scorer of ``project``: a PRM adapter (``token-classification``,
        ``step-tag-lm``…) or an LLM judge (``llm-judge``, with ``parameters`` such as
        ``backend``, ``base_url``, ``mode`` and, optionally, its first ``prompt``:
        ``{"system", "template"}``). Further fields (``revision``, ``queue``) pass as given."""
        body: dict[str, Any] = {"project": project, "name": name, "kind": kind, **fields}
        if model_ref:
            body["model_ref"] = model_ref
        if parameters is not None:
            body["parameters"] = dict(parameters)
        if prompt is not None:
            body["prompt"] = dict(prompt)
        return dict(self._request("POST", "scorers/", json=body))

    def scorers(self, project: str) -> list[dict[str, Any]]:
        """The scorers ``project`` may use (its own and those offered to every project)."""
        return list(self._pages("scorers/", {"project": project}))

    def start_judge(
        self,
        project: str,
        judge: str,
        *,
        prompt_version: int | None = None,
        on_too_long: str | None = None,
        **options: Any,
    ) -> Job:
        """Queue a run of the LLM judge ``judge`` (a name or id), with its newest prompt
        version unless ``prompt_version`` names one. ``on_too_long`` and ``options``
        (``filters``, ``trajectories``, ``only_unscored``, ``queue``; ``rubric``, the
        rubric a judge in the ``rubric`` mode fills) as for scoring."""
        body: dict[str, Any] = {"project": project, "scorer": judge, **options}
        if prompt_version is not None:
            body["prompt_version"] = prompt_version
        if on_too_long is not None:
            body["on_too_long"] = on_too_long
        return Job("scoring-runs", self._request("POST", "scoring-runs/", json=body))

    def train_head(
        self,
        project: str,
        name: str,
        *,
        score_after: bool = False,
        parameters: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Job:
        """Train a new revision of the trained-head scorer ``name`` on the project's
        human labels (a scoring run; ``wait`` on it). With ``score_after`` the new
        revision then scores the project. ``options``: ``encoder``, ``neutral``,
        ``holdout``."""
        body: dict[str, Any] = {
            "project": project,
            "name": name,
            "score_after": score_after,
            "parameters": dict(parameters or {}),
            **options,
        }
        return Job("scoring-runs", self._request("POST", "scorers/train/", json=body))

    def start_attribution(
        self,
        project: str,
        method: str,
        *,
        scorer: str = "",
        labels: str = "",
        parameters: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Job:
        """Queue a credit-assignment run: ``method`` such as ``prm-delta``, ``returns``,
        ``gae``, ``mc-prefix``, ``group-relative``; ``scorer`` (a name or id) or
        ``labels`` (a label source) give the step rewards where the method needs them;
        ``parameters`` the method's.
        ``options``: ``filters``, ``trajectories``, ``step``."""
        body: dict[str, Any] = {
            "project": project,
            "method": method,
            "scorer": scorer,
            "labels": labels,
            "parameters": dict(parameters or {}),
            **options,
        }
        return Job("attribution-runs", self._request("POST", "attribution-runs/", json=body))

    def start_rollouts(
        self, project: str, policy: str, k: int, *, steps: Any = "all", **options: Any
    ) -> Job:
        """Queue ``k`` continuations of ``policy`` (a name or id) from ``steps``: ``"all"``
        labelable steps, ``"first-error-search"``, or a list of step ids. ``options``:
        ``trajectories``, ``filters``, ``answer_check``, ``max_tokens``,
        ``max_continuations``, ``critical`` and ``alternatives``, ``against``."""
        body: dict[str, Any] = {"project": project, "policy": policy, "k": k, "steps": steps}
        return Job("rollouts", self._request("POST", "rollouts/", json={**body, **options}))

    # Reading results back

    def scores(self, trajectory: int, *, scorer: str | int | None = None) -> list[dict[str, Any]]:
        """A trajectory's step scores in step order (every scorer's, or ``scorer``'s):
        ``{"step", "index", "scorer", "value", …}``."""
        params = {} if scorer is None else {"scorer": str(scorer)}
        return list(self._request("GET", f"trajectories/{trajectory}/scores/", params=params))

    def credits(self, trajectory: int, *, run: int | None = None) -> list[dict[str, Any]]:
        """A trajectory's step credits in step order (every run's, or run ``run``'s)."""
        params = {} if run is None else {"run": str(run)}
        return list(self._request("GET", f"trajectories/{trajectory}/credits/", params=params))

    def run_credits(self, run: int, *, trajectory: int | None = None) -> Iterator[dict[str, Any]]:
        """Every credit of attribution run ``run`` (of one trajectory, with
        ``trajectory``), page after page: ``{"step", "trajectory", "index", "value", …}``."""
        params = {} if trajectory is None else {"trajectory": str(trajectory)}
        return self._pages(f"attribution-runs/{run}/credits/", params)

    def mc_values(
        self, trajectory: int, *, policy: str | int | None = None
    ) -> list[dict[str, Any]]:
        """A trajectory's Monte Carlo values per step (``k``, ``successes``, ``soft``,
        ``hard``), every policy's or ``policy``'s."""
        params = {} if policy is None else {"policy": str(policy)}
        return list(self._request("GET", f"trajectories/{trajectory}/mc-values/", params=params))

    def _pages(self, path: str, params: Mapping[str, str]) -> Iterator[dict[str, Any]]:
        """The results of a list, following its ``next`` links (a list that is not paged
        comes in one answer)."""
        answer = self._request("GET", path, params=dict(params))
        while True:
            if isinstance(answer, list):
                yield from answer
                return
            yield from answer["results"]
            if not answer.get("next"):
                return
            answer = self._request("GET", answer["next"])
