"""The one selection language: the filters that pick a project's trajectories, by the
names every consumer takes. The trajectory list's query string, ``GET
/api/v1/trajectories/``, saved selections, labeling queues, scoring, judge, attribution
and rollout runs (first-error search included) and exports all parse a selection here and
apply it with ``trajectories.selectors.trajectories_filtered``, so a name means the same
everywhere and a name nobody knows is refused, never dropped.

A filter is one field of ``TrajectoryFilters`` declared with :func:`text`, :func:`choice`,
:func:`integer` or :func:`number`: its name, type, bounds, the old names it still answers
to, and (for a plain condition on one trajectory column) the column and lookup that apply
it. Adding such a filter is that one declaration; a filter that needs a join of its own
also registers a condition (``trajectories.selectors.trajectory_filter_register``) in the
app that owns its tables. See CONTRIBUTING.md, "Add a trajectory filter".
"""

# Django-free: a selection is plain data parsed the same from a query string and from JSON.
from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trajectories.metadata_query import MetadataSyntaxError, metadata_conditions_parse

SEARCH_MAX_LENGTH = 500
TEXT_MAX_LENGTH = 1000
# The values of ``trajectories.models.Step.Kind`` (a test keeps the two equal).
STEP_KINDS = ("message", "thought", "action", "tool_call", "tool_result", "observation", "answer")


@dataclass(frozen=True)
class FilterSpec:
    """What one filter accepts. ``column`` / ``lookup``: a condition on the trajectory's
    own column (``step_count__gte``) that ``trajectories_filtered`` applies without code
    of its own; ``step_column`` / ``lookup``: the same on a column of some one step of
    the trajectory (``advantage__lt``). Both empty for a filter whose condition is
    written out."""

    name: str
    kind: type  # str, int or float
    label: str
    help: str
    group: str  # trajectory, steps, labels or models: where the list's form shows it
    choices: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    max_length: int = TEXT_MAX_LENGTH
    column: str = ""
    step_column: str = ""
    lookup: str = "exact"
    # Reads everyone's labels (a failure mode is made of first errors): a project that
    # hides labels or model scores from its annotators refuses it to them, as it refuses
    # them the failures page (``selection_refused_to_blind``).
    reviewers_only: bool = False


def _field(default: Any, spec: dict[str, Any]) -> Any:
    return dataclasses.field(default=default, metadata={"spec": spec})


def text(label: str, help: str, *, group: str, **spec: Any) -> Any:
    """A text filter; empty filters nothing."""
    return _field("", {"kind": str, "label": label, "help": help, "group": group, **spec})


def choice(label: str, help: str, choices: Iterable[str], *, group: str, **spec: Any) -> Any:
    """One of ``choices``; empty filters nothing."""
    return _field(
        "",
        {
            "kind": str,
            "label": label,
            "help": help,
            "group": group,
            "choices": tuple(choices),
            **spec,
        },
    )


def integer(label: str, help: str, *, group: str, **spec: Any) -> Any:
    """A whole number; None filters nothing."""
    return _field(None, {"kind": int, "label": label, "help": help, "group": group, **spec})


def number(label: str, help: str, *, group: str, default: float | None = None, **spec: Any) -> Any:
    """A number; its default (None unless given) filters nothing."""
    return _field(default, {"kind": float, "label": label, "help": help, "group": group, **spec})


# Where a trajectory came from: ``rollouts`` are the continuations a rollout job wrote
# (an internal import batch), ``imported`` everything else.
ORIGINS = ("imported", "rollouts")
# What the list page shows when its query names no origin: the rollouts' continuations
# are reached from the trajectory they continue, or with ``origin=rollouts``.
LIST_DEFAULT_ORIGIN = "imported"


@dataclass(frozen=True)
class TrajectoryFilters:
    """A selection of a project's trajectories: every filter set must pass. The default
    value of a field filters nothing."""

    q: str = text(
        "Search",
        'Full-text search over the task and step text: words, "a phrase", or, -word.',
        group="trajectory",
        aliases=("search",),
        max_length=SEARCH_MAX_LENGTH,
    )
    # Semantic search (the discovery app's condition): the trajectories whose steps (and,
    # for text, task) mean nearest to the text or to one step, nearest first.
    similar: str = text(
        "Similar to",
        "Steps that mean something like this text (semantic search), nearest first;"
        " combines with every other filter.",
        group="trajectory",
        max_length=SEARCH_MAX_LENGTH,
    )
    similar_step: int | None = integer(
        "Similar to step",
        "A step's id: the steps nearest in meaning to it (more like this step), nearest first.",
        group="trajectory",
        minimum=1,
    )
    outcome: str = choice(
        "Outcome",
        "success, failure or unknown.",
        ("success", "failure", "unknown"),
        group="trajectory",
    )
    model: str = text(
        "Model",
        "The model name; with a trailing * the names that start so (gpt-4o*).",
        group="trajectory",
        aliases=("model_name",),
        column="model_name",
    )
    task: str = text(
        "Task key",
        "The task key; with a trailing * the keys that start so (arith-11*).",
        group="trajectory",
        aliases=("task_key",),
        column="task_key",
    )
    min_steps: int | None = integer(
        "Min steps",
        "At least this many steps.",
        group="trajectory",
        minimum=0,
        column="step_count",
        lookup="gte",
    )
    max_steps: int | None = integer(
        "Max steps",
        "At most this many steps.",
        group="trajectory",
        minimum=0,
        column="step_count",
        lookup="lte",
    )
    # Some one step matches all of tool, agent, kind and error_steps=yes that are set.
    origin: str = choice(
        "Origin",
        "imported: from files, pushes and live traces; rollouts: a rollout job's"
        " continuations. The list page shows the imported ones unless told otherwise.",
        ORIGINS,
        group="trajectory",
    )
    tool: str = text(
        "Tool",
        "Some step calls this tool (a trailing * for the names that start so).",
        group="steps",
        aliases=("tool_name",),
    )
    agent: str = text(
        "Agent",
        "Some step is by this agent (a trailing * for the names that start so; with tool"
        " and kind: the same step).",
        group="steps",
    )
    kind: str = choice(
        "Step kind",
        "Some step is of this kind.",
        STEP_KINDS,
        group="steps",
        aliases=("step_kind",),
    )
    error_steps: str = choice(
        "Error steps",
        "yes: some step's metadata has an error; no: none has.",
        ("yes", "no"),
        group="steps",
        aliases=("error_step",),
    )
    meta: str = text(
        "Metadata",
        "Conditions on the trajectory's metadata: metadata.level = 3, metadata.cost >= 0.5",
        group="steps",
        aliases=("metadata",),
    )
    # The label schema (by name) the label filters below read; empty: the project's one
    # schema (a project with several must name one).
    label_schema: str = text(
        "Label schema",
        "The label schema (a name) the label filters and human_model read; needed where"
        " the project has several.",
        group="labels",
        max_length=100,
    )
    # Submitted labels (anyone's) on the labelable steps.
    label_status: str = choice(
        "Label status",
        "unlabelled (no step), partial (some) or complete (every labelable step).",
        ("unlabelled", "partial", "complete"),
        group="labels",
    )
    # Among steps two or more human annotators labelled, the share where all gave the
    # same value; trajectories with no such step are out.
    min_agreement: float | None = number(
        "Agreement at least",
        "Share (0..1) of the steps labelled by two or more people where all agree.",
        group="labels",
        minimum=0.0,
        maximum=1.0,
        reviewers_only=True,
    )
    first_error: str = choice(
        "Has a first error",
        "yes: some step has a submitted label of the schema's error value (-1 in a ternary one),"
        " a person's or an import's; no: none has.",
        ("yes", "no"),
        group="labels",
        reviewers_only=True,
    )
    # The discovery app's condition: the members of one failure mode of a clustering run.
    failure_mode: int | None = integer(
        "Failure mode",
        "A failure mode's id (the failure-modes page): the trajectories whose first error"
        " it holds.",
        group="labels",
        minimum=1,
        reviewers_only=True,
    )
    # The human majority against model_scorer's scores thresholded at model_threshold, on
    # steps where both have a non-neutral value.
    human_model: str = choice(
        "Human and model",
        "agree (all compared steps agree) or disagree (one differs); needs model_scorer.",
        ("agree", "disagree"),
        group="models",
        reviewers_only=True,
    )
    model_scorer: str = text(
        "Scorer", "The scorer human_model compares with (a name).", group="models"
    )
    model_threshold: float = number(
        "Score threshold",
        "A score at or above it is a good step (0..1; default 0.5).",
        group="models",
        default=0.5,
        minimum=0.0,
        maximum=1.0,
    )
    credit_run: int | None = integer(
        "Attribution run",
        "An attribution run's id, for credit_above / credit_below.",
        group="models",
        minimum=1,
    )
    credit_above: float | None = number(
        "A step's credit above",
        "Some step's credit in credit_run is above this.",
        group="models",
        reviewers_only=True,
    )
    credit_below: float | None = number(
        "A step's credit below",
        "Some step's credit in credit_run is below this.",
        group="models",
        reviewers_only=True,
    )

    # RL training facts (trajectories/training_filters.py, labeling/filters.py).
    policy_version: str = text(
        "Policy version",
        "The rollout's policy version (7, global_step_12), or a range of the number it"
        " ends with: 3..7, 3.., ..7.",
        group="training",
        aliases=("policy",),
        max_length=200,
    )
    min_training_step: int | None = integer(
        "Min training step",
        "The trainer's step that used the rollout is at least this.",
        group="training",
        aliases=("min_train_step",),
        column="training_step",
        lookup="gte",
    )
    max_training_step: int | None = integer(
        "Max training step",
        "The trainer's step that used the rollout is at most this.",
        group="training",
        aliases=("max_train_step",),
        column="training_step",
        lookup="lte",
    )
    min_advantage: float | None = number(
        "Min advantage",
        "Some step's advantage is at least this (with max_advantage: the same step).",
        group="training",
    )
    max_advantage: float | None = number(
        "Max advantage",
        "Some step's advantage is at most this (with min_advantage: the same step).",
        group="training",
    )
    advantage_disagrees: str = choice(
        "Advantage against label",
        "yes: some step's advantage has the other sign than its human majority label.",
        ("yes",),
        group="training",
        reviewers_only=True,
    )

    def is_empty(self) -> bool:
        return self == TrajectoryFilters()

    @property
    def ranked(self) -> bool:
        """Whether the selection has an order of its own (nearest first), which the list
        shows unless told to sort by a column."""
        return bool(self.similar) or self.similar_step is not None


@dataclass(frozen=True)
class VersionRange:
    """A range of the number a policy version ends with; either end may be open."""

    low: int | None
    high: int | None


_RANGE = re.compile(r"^\s*(-?\d+)?\s*\.\.\s*(-?\d+)?\s*$")


def policy_version_parse(text: str) -> str | VersionRange | None:
    """An exact version, a range (``A..B``, either end left out), or None for no filter.
    ValueError for ``..`` alone or a range whose low end is above its high end."""
    text = text.strip()
    if not text:
        return None
    match = _RANGE.match(text)
    if match is None:
        return text
    low, high = (None if end is None else int(end) for end in match.groups())
    if low is None and high is None:
        raise ValueError(f"policy version {text!r} has neither end; write A..B, A.. or ..B")
    if low is not None and high is not None and low > high:
        raise ValueError(f"policy version range {text!r} runs backwards ({low} > {high})")
    return VersionRange(low, high)


FILTERS: dict[str, FilterSpec] = {
    field.name: FilterSpec(name=field.name, **field.metadata["spec"])
    for field in dataclasses.fields(TrajectoryFilters)
}
# Old names that stored selections and scripts still use, each answering to its filter.
ALIASES: dict[str, str] = {alias: spec.name for spec in FILTERS.values() for alias in spec.aliases}


class SelectionError(ValueError):
    """A selection that does not parse. ``errors`` maps each bad name (as given) to what
    is wrong with it; ``unknown`` lists the names no filter answers to."""

    def __init__(self, errors: Mapping[str, str], unknown: Iterable[str] = ()) -> None:
        self.errors = dict(errors)
        self.unknown = sorted(unknown)
        super().__init__("; ".join(f"{name}: {message}" for name, message in self.errors.items()))

    def by_name(self) -> dict[str, list[str]]:
        """The messages as a 400's body carries them: a list per name."""
        return {name: [message] for name, message in self.errors.items()}


UNKNOWN_MESSAGE = f"unknown filter; the filters are {', '.join(FILTERS)}"


def selection_parse(data: Mapping[str, Any], *, ignore: Iterable[str] = ()) -> TrajectoryFilters:
    """A selection from a query string (every value a string) or a JSON object (numbers
    as numbers, or as strings). Empty values and None filter nothing. Names in ``ignore``
    (a list's paging and ordering parameters) are passed over; any other name that is
    neither a filter nor one of its old names is refused. Raises SelectionError naming
    every bad name."""
    ignored = set(ignore)
    errors: dict[str, str] = {}
    unknown: list[str] = []
    values: dict[str, Any] = {}
    for given, raw in data.items():
        if given in ignored:
            continue
        name = ALIASES.get(given, given)
        spec = FILTERS.get(name)
        if spec is None:
            unknown.append(given)
            continue
        if name in values:
            errors[given] = f"given twice (as {name} and an old name of it)"
            continue
        try:
            value = _value(spec, raw)
        except ValueError as error:
            errors[given] = str(error)
            continue
        if value is not None:
            values[name] = value
    if unknown:
        errors = dict.fromkeys(unknown, UNKNOWN_MESSAGE) | errors
    if not errors:
        errors = _checks_across(values)
    if errors:
        raise SelectionError(errors, unknown)
    return TrajectoryFilters(**values)


# What a command's repeatable ``--filter`` says of itself.
COMMAND_HELP = (
    "a trajectory filter, as the list's query string has it: task=arith-11-3, q=refund,"
    " label_status=partial (repeatable; every one must hold)"
)


def selection_from_pairs(pairs: Iterable[str]) -> TrajectoryFilters:
    """A selection from ``NAME=VALUE`` texts (a command's ``--filter``), parsed as a
    query string is; SelectionError names a pair without ``=`` or a bad filter."""
    given: dict[str, Any] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals:
            raise SelectionError({pair: "write a filter as NAME=VALUE"})
        given.setdefault(name.strip(), []).append(value)
    return selection_parse(given)


def _value(spec: FilterSpec, raw: Any) -> Any:
    """The filter's value from what was given, or None when it filters nothing."""
    if isinstance(raw, (list, tuple)):
        if len(raw) != 1:
            raise ValueError("give one value")
        raw = raw[0]
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if isinstance(raw, bool):
        raise ValueError(f"expected {_expected(spec)}, not {raw!r}")
    if spec.kind is str:
        if not isinstance(raw, str):
            raise ValueError(f"expected text, not {raw!r}")
        value = raw.strip()
        if len(value) > spec.max_length:
            raise ValueError(f"longer than {spec.max_length} characters")
        if spec.choices and value not in spec.choices:
            raise ValueError(f"{value!r} is not one of {', '.join(spec.choices)}")
        if spec.name == "meta":
            try:
                metadata_conditions_parse(value)
            except MetadataSyntaxError as error:
                raise ValueError(str(error)) from None
        if spec.name == "policy_version":
            policy_version_parse(value)
        return value
    number_value: int | float
    try:
        if spec.kind is int:
            if isinstance(raw, float) and not raw.is_integer():
                raise ValueError
            number_value = int(raw.strip() if isinstance(raw, str) else raw)
        else:
            number_value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"expected {_expected(spec)}, not {raw!r}") from None
    if isinstance(number_value, float) and not math.isfinite(number_value):
        raise ValueError(f"expected a finite number, not {raw!r}")
    if spec.minimum is not None and number_value < spec.minimum:
        raise ValueError(f"{number_value} is below {spec.minimum:g}")
    if spec.maximum is not None and number_value > spec.maximum:
        raise ValueError(f"{number_value} is above {spec.maximum:g}")
    return number_value


def _expected(spec: FilterSpec) -> str:
    return "a whole number" if spec.kind is int else "a number"


def _checks_across(values: Mapping[str, Any]) -> dict[str, str]:
    errors: dict[str, str] = {}
    if values.get("similar") and values.get("similar_step") is not None:
        errors["similar_step"] = "give similar (a text) or similar_step (a step), not both"
    if values.get("human_model") and not values.get("model_scorer"):
        errors["human_model"] = "needs model_scorer (the scorer to compare with)"
    for bound in ("credit_above", "credit_below"):
        if bound in values and "credit_run" not in values:
            errors[bound] = "needs credit_run (an attribution run's id)"
    for low_name, high_name in (
        ("min_steps", "max_steps"),
        ("min_training_step", "max_training_step"),
        ("min_advantage", "max_advantage"),
    ):
        low, high = values.get(low_name), values.get(high_name)
        if low is not None and high is not None and low > high:
            errors[high_name] = f"{high} is below {low_name} {low}"
    return errors


# A filter that only refines another: dropping the other drops it too.
_DEPENDS_ON = {
    "human_model": "model_scorer",
    "credit_above": "credit_run",
    "credit_below": "credit_run",
}


def selection_without(filters: TrajectoryFilters, names: Iterable[str]) -> TrajectoryFilters:
    """``filters`` with the named filters (and those that need them) back at their
    defaults: what a page still applies when some of its filters are refused."""
    dropped = set(names)
    dropped |= {name for name, needs in _DEPENDS_ON.items() if needs in dropped}
    default = TrajectoryFilters()
    return dataclasses.replace(
        filters, **{name: getattr(default, name) for name in dropped if name in FILTERS}
    )


BLIND_MESSAGE = (
    "this project hides labels or model scores from annotators until they submit; only"
    " researchers and admins filter by it"
)


def selection_refused_to_blind(
    filters: TrajectoryFilters, *, hidden: bool
) -> SelectionError | None:
    """Where ``hidden`` (the member may not see everyone's labels in this project), the
    error naming each filter set that reads them (``FilterSpec.reviewers_only``)."""
    if not hidden:
        return None
    default = TrajectoryFilters()
    refused = {
        name: BLIND_MESSAGE
        for name, spec in FILTERS.items()
        if spec.reviewers_only and getattr(filters, name) != getattr(default, name)
    }
    return SelectionError(refused) if refused else None


def selection_definition(filters: TrajectoryFilters) -> dict[str, Any]:
    """The filters that filter something, by their names, as JSON stores them (a saved
    selection, a job's selection, an export's manifest). ``selection_parse`` reads it back
    to the same value."""
    default = TrajectoryFilters()
    return {
        name: value
        for name, value in dataclasses.asdict(filters).items()
        if value != getattr(default, name)
    }


def selection_query(filters: TrajectoryFilters) -> dict[str, str]:
    """The filters as the list's query string carries them (a saved selection opened as
    the list). ``origin`` is always named, empty for any, since the list page's own
    default is ``LIST_DEFAULT_ORIGIN``."""
    query = {name: _query_text(value) for name, value in selection_definition(filters).items()}
    return {"origin": "", **query}


def _query_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) < 1e15 else repr(value)
    return str(value)
