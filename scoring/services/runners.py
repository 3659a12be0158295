"""What a scoring run does with its scorer's kind (``scoring.prm.kinds``): the run's
options, each chunk's work on a worker, and what a new scorer of the kind gets.

A kind that scores with a StepScorer (every PRM kind, the trained head) is run by
:data:`MODEL_RUNNER`; a kind that names ``runner`` (the LLM judge:
``scoring.services.judges.JUDGE_RUNNER``) is run by that. The scoring services reach a
kind's behaviour only through :func:`kind_runner`, so they branch on no kind's name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Any, Protocol

from scoring import prm
from scoring.models import JudgePrompt, Scorer, ScoringChunk, ScoringRun
from trajectories.models import Step, Trajectory

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.db.models import QuerySet

    from scoring.services.failure_attributions import VerdictInput
    from scoring.services.rubric_marks import RubricMarkInput
    from trajectories.models import Project


# A run lists this many of the prompts it skipped as too long (``metrics["skipped"]``;
# ``skipped_count`` counts them all).
SKIPPED_LISTED = 200


class ScoringError(Exception):
    """A request the scoring services refuse, with a message for the user and, where one
    field is at fault, its name (``model_ref``, ``trust_remote_code``)."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class RunStopped(Exception):
    """The run ended (cancelled or failed elsewhere) while this chunk was working."""


class RunRefused(Exception):
    """A chunk's work that no retry will mend (a bad endpoint, key, model or prompt): the
    run fails with this message and the task ends."""


@dataclasses.dataclass
class ChunkOutcome:
    """What a chunk gives: step values, failure verdicts (a judge's attribution modes),
    rubric marks (its rubric mode) and its cost for the run's metrics (a judge's calls
    and tokens)."""

    results: list[prm.StepResult]
    cost: dict[str, int] = dataclasses.field(default_factory=dict)
    verdicts: list[VerdictInput] = dataclasses.field(default_factory=list)
    rubric_marks: list[RubricMarkInput] = dataclasses.field(default_factory=list)
    # The requests left without a verdict because their prompts are too long, for the
    # run's list: {"trajectory", "step" (None for a whole trajectory), "reason"}.
    skipped: list[dict[str, Any]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """What a new run of a scorer records: the prompt version it asks with, its first
    metrics and its parameters."""

    prompt: JudgePrompt | None = None
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)


class KindRunner(Protocol):
    def run_options(
        self,
        scorer: Scorer,
        *,
        project: Project,
        prompt_version: int | None,
        on_too_long: str | None,
        rubric: str | None = None,
    ) -> RunOptions:
        """The options of a new run, or :class:`ScoringError` for ones it cannot take."""
        ...

    def chunk(self, run: ScoringRun, chunk: ScoringChunk) -> ChunkOutcome:
        """Score one chunk on a worker (writing nothing the run's finish does not)."""
        ...

    def judged(self, run: ScoringRun) -> QuerySet[Any] | None:
        """Where its runs answer per trajectory (FailureVerdicts, rubric marks), the rows
        of ``run``'s answers already there, with a ``trajectory_id`` (``only_unscored``
        leaves their trajectories out); None where it scores steps."""
        ...

    def created(
        self, scorer: Scorer, *, prompt: Mapping[str, Any] | None, user: User | None
    ) -> None:
        """What a new scorer gets besides its row (a judge: prompt version 1)."""
        ...


def kind_runner(name: str) -> KindRunner:
    """The runner of kind ``name`` (:class:`ScoringError` for an unknown kind)."""
    try:
        kind = prm.kind_get(name)
    except prm.ScorerError as error:
        raise ScoringError(str(error), field="kind") from None
    if not kind.runner:
        return MODEL_RUNNER
    module, _, attribute = kind.runner.partition(":")
    runner: KindRunner = getattr(import_module(module), attribute)
    return runner


def scorer_spec(scorer: Scorer) -> prm.ScorerSpec:
    """The scorer as a worker loads it."""
    kind = prm.kind_get(scorer.kind)
    return prm.ScorerSpec(
        kind=scorer.kind,
        model_ref=scorer.model_ref,
        params=kind.parameters(scorer.parameters),
        revision=scorer.revision if kind.hub_revision else "",
        trust_remote_code=scorer.trust_remote_code,
        artifact=(scorer.artifact or {}).get("head"),
    )


def trajectory_inputs(chunk: ScoringChunk) -> list[prm.TrajectoryInput]:
    """The chunk's trajectories, each cut after its last step to score."""
    wanted = set(chunk.step_ids)
    tasks_by_id = dict(
        Trajectory.objects.filter(pk__in=chunk.trajectory_ids).values_list("pk", "task")
    )
    steps: dict[int, list[prm.StepInput]] = {pk: [] for pk in tasks_by_id}
    rows = (
        Step.objects.filter(trajectory_id__in=chunk.trajectory_ids)
        .order_by("trajectory_id", "index")
        .values_list("trajectory_id", "pk", "role", "content", "labelable")
    )
    for trajectory_id, pk, role, content, labelable in rows.iterator(chunk_size=2000):
        steps[trajectory_id].append(
            prm.StepInput(pk, content, role, labelable=labelable, score=pk in wanted)
        )
    inputs = []
    for trajectory_id, items in steps.items():
        last = max((i for i, s in enumerate(items) if s.score), default=-1)
        if last >= 0:
            inputs.append(
                prm.TrajectoryInput(
                    trajectory_id, tasks_by_id[trajectory_id], tuple(items[: last + 1])
                )
            )
    return inputs


class ModelRunner:
    """A kind that scores with the StepScorer its ``build`` names, loaded once per
    worker process (``scoring.prm.adapters.scorer_load``)."""

    def run_options(
        self,
        scorer: Scorer,
        *,
        project: Project,
        prompt_version: int | None,
        on_too_long: str | None,
        rubric: str | None = None,
    ) -> RunOptions:
        if rubric is not None:
            raise ScoringError(
                f"{scorer.name} is not an llm-judge; only a judge fills a rubric", field="rubric"
            )
        if prompt_version is not None:
            raise ScoringError(f"{scorer.name} is not an llm-judge; it has no prompt versions")
        if on_too_long is not None:
            raise ScoringError(
                f"{scorer.name} is not an llm-judge; on_too_long is for judges (a model"
                " scorer truncates and counts what it truncates)",
                field="on_too_long",
            )
        return RunOptions()

    def chunk(self, run: ScoringRun, chunk: ScoringChunk) -> ChunkOutcome:
        from scoring.prm import adapters

        assert run.scorer is not None
        model = adapters.scorer_load(scorer_spec(run.scorer))
        return ChunkOutcome(model.score(trajectory_inputs(chunk)))

    def judged(self, run: ScoringRun) -> QuerySet[Any] | None:
        return None

    def created(
        self, scorer: Scorer, *, prompt: Mapping[str, Any] | None, user: User | None
    ) -> None:
        return None


MODEL_RUNNER = ModelRunner()
