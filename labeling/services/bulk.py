"""Many step labels in one all-or-nothing write: each item goes through
:func:`~labeling.services.labels.step_label_set`, the service the labeling surface uses,
so the rules (roles, leases, blind mode, schema values, history rows) are the page's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Q

from labeling.models import TrajectoryLabel
from labeling.selectors import AnyUser, LabelingState, labeling_state_for_user
from labeling.services.common import LabelingError
from labeling.services.labels import StepLabelResult, step_label_set, trajectory_submit
from trajectories.models import Step
from trajectories.selectors import projects_for_user

# The most labels one request may carry.
LABEL_BATCH_MAX = 10_000
# The fields of one item the label service takes, besides the step.
LABEL_FIELDS = ("value", "first_error", "tags", "rationale", "correction", "time_spent_ms")


class BulkLabelsRejected(Exception):
    """Nothing was written. ``errors`` maps an item's index (or ``submit`` and a
    trajectory id) to ``{field: message}``; ``status`` is the one HTTP status every
    problem shares, else 400."""

    def __init__(self, errors: dict[str, dict[str, Any]], status: int = 400) -> None:
        super().__init__(f"{len(errors)} label(s) refused")
        self.errors = errors
        self.status = status


@dataclass
class BulkLabelsResult:
    labels: list[StepLabelResult]
    submitted: list[TrajectoryLabel] = field(default_factory=list)


def step_labels_set(
    *,
    user: AnyUser,
    items: list[dict[str, Any]],
    queue_id: int | None = None,
    schema_id: int | None = None,
    submit: bool = False,
    verdict: dict[str, Any] | None = None,
) -> BulkLabelsResult:
    """Set ``user``'s labels on many steps, in one transaction: every item is checked
    and written, and if any is refused, nothing is kept and :class:`BulkLabelsRejected`
    names each refused item and field. An item names its step by ``step`` (id) or by
    ``trajectory`` (id) and ``index``; its other keys are :data:`LABEL_FIELDS` and
    ``schema`` (else ``schema_id``). With ``submit`` each trajectory the items touch is
    then submitted (with ``verdict``'s outcome, finish reason, comment, flag), as the
    page's finish button does."""
    steps = _steps_for(user, items)
    errors: dict[str, dict[str, Any]] = {}
    statuses: set[int] = set()
    results: list[StepLabelResult] = []
    states: dict[int, LabelingState] = {}
    with transaction.atomic():
        for number, item in enumerate(items):
            step = steps.get(number)
            if step is None:
                where = "step" if item.get("step") is not None else "index"
                errors[str(number)] = {where: "No such step in your projects."}
                statuses.add(404)
                continue
            try:
                state = states.get(step.trajectory_id)
                if state is None:
                    state = labeling_state_for_user(user, step.trajectory_id, queue_id=queue_id)
                    states[step.trajectory_id] = state
                # Each label in a savepoint: a refused one leaves the others' checks
                # meaningful, and the whole batch is rolled back at the end anyway.
                with transaction.atomic():
                    results.append(
                        step_label_set(
                            state=state,
                            step=step,
                            schema_id=item.get("schema", schema_id),
                            **{k: item[k] for k in LABEL_FIELDS if k in item},
                        )
                    )
            except LabelingError as error:
                errors[str(number)] = {error.field or "step": error.message}
                statuses.add(error.status)
        submitted: list[TrajectoryLabel] = []
        if submit and not errors:
            for trajectory_id in states:
                fresh = labeling_state_for_user(user, trajectory_id, queue_id=queue_id)
                try:
                    with transaction.atomic():
                        submitted.append(trajectory_submit(state=fresh, **(verdict or {})))
                except LabelingError as error:
                    errors.setdefault("submit", {})[str(trajectory_id)] = error.message
                    statuses.add(error.status)
        if errors:
            # Raised inside the transaction, so nothing of the batch is kept.
            raise BulkLabelsRejected(errors, statuses.pop() if len(statuses) == 1 else 400)
    return BulkLabelsResult(labels=results, submitted=submitted)


def _steps_for(user: AnyUser, items: list[dict[str, Any]]) -> dict[int, Step]:
    """Item index → its step, for the items whose step lies in ``user``'s projects; two
    queries whatever the batch's size."""
    by_id = {int(item["step"]) for item in items if item.get("step") is not None}
    by_position = {
        (int(item["trajectory"]), int(item["index"]))
        for item in items
        if item.get("step") is None
        and item.get("trajectory") is not None
        and item.get("index") is not None
    }
    visible = Step.objects.filter(trajectory__project__in=projects_for_user(user)).only(
        "id", "trajectory_id", "index", "labelable", "kind", "role", "agent"
    )
    found_by_id = {s.pk: s for s in visible.filter(pk__in=by_id)} if by_id else {}
    found_by_position: dict[tuple[int, int], Step] = {}
    if by_position:
        wanted = Q(pk__in=[])
        trajectories: dict[int, list[int]] = {}
        for trajectory_id, index in by_position:
            trajectories.setdefault(trajectory_id, []).append(index)
        for trajectory_id, indexes in trajectories.items():
            wanted |= Q(trajectory_id=trajectory_id, index__in=indexes)
        found_by_position = {(s.trajectory_id, s.index): s for s in visible.filter(wanted)}
    steps: dict[int, Step] = {}
    for number, item in enumerate(items):
        if item.get("step") is not None:
            step = found_by_id.get(int(item["step"]))
        elif item.get("trajectory") is not None and item.get("index") is not None:
            step = found_by_position.get((int(item["trajectory"]), int(item["index"])))
        else:
            step = None
        if step is not None:
            steps[number] = step
    return steps
