"""Rules: as trajectories arrive (``trajectories.arrivals``), a worker runs each active
rule of their project over them, and on demand over the whole project (a backfill).

A rule acts on a trajectory once: its ``RuleFiring`` rows are inserted first, unique on
(rule, trajectory), and the rule acts only on the rows this insert made, in the same
transaction, so two tasks over one arrival (a redelivery, a backfill meanwhile) never act
twice, and an action that fails leaves no firing behind (the next arrival or a backfill
tries again). The sampling rate keeps a trajectory by a hash of (rule, trajectory)
(``automation/sampling.py``): a retry decides the same."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from django.contrib.auth.models import User
from django.db import connection, transaction

from automation.models import ArrivalMissed, Rule, RuleFiring, Webhook
from automation.sampling import sample_keeps
from automation.services.webhooks import webhook_event_record
from exports.services import export_start
from exports.services.batches import batch_name_check
from exports.services.plan import export_plan_resolve
from exports.services.requests import export_request_parse
from labeling.models import Queue
from labeling.services import queue_items_insert
from scoring.models import Scorer
from scoring.services import ScoringError, scoring_run_start
from stepscope.events import event_emit
from stepscope.queueing import QueueUnavailable, broker_require, send_if_up
from trajectories.arrivals import Arrival
from trajectories.models import Project
from trajectories.selection import (
    SelectionError,
    TrajectoryFilters,
    selection_definition,
    selection_parse,
)
from trajectories.selectors import selection_check, trajectories_filtered

logger = logging.getLogger(__name__)

# Trajectories a rule takes per transaction (one action each: one queue insert, one run).
FIRE_CHUNK = 5000
# The export parameters a rule's export action takes (those of the export API).
EXPORT_PARAMETERS = frozenset(
    {
        "format",
        "labels",
        "neutral",
        "container",
        "compress",
        "split",
        "seed",
        "threshold",
        "scorer",
        "credit_run",
        "options",
        # Beside the export API's: the named batch each export becomes the next version of.
        "batch",
    }
)


class RuleError(ValueError):
    """A rule that cannot be saved; ``field`` names the value at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def rule_create(
    *,
    project: Project,
    name: str,
    filters: TrajectoryFilters,
    action: str,
    user: User | None,
    rate: float = 1.0,
    queue: Queue | None = None,
    scorer: Scorer | None = None,
    webhook: Webhook | None = None,
    export: dict[str, Any] | None = None,
) -> Rule:
    """A rule, checked: its selection against the project, its target in the project."""
    name = name.strip()
    if not name:
        raise RuleError("name", "Give the rule a name.")
    if Rule.objects.filter(project=project, name=name).exists():
        raise RuleError("name", f"A rule named {name!r} exists already.")
    if not 0 < rate <= 1:
        raise RuleError("rate", f"The sampling rate is a share above 0 and at most 1, not {rate}.")
    if action not in Rule.Action.values:
        raise RuleError(
            "action", f"Unknown action {action!r}; the actions are {', '.join(Rule.Action.values)}."
        )
    selection_check(project, filters)  # SelectionError names a scorer or run it lacks
    targets: dict[str, Any] = {"queue": queue, "scorer": scorer, "webhook": webhook}
    wanted = {"queue": "queue", "score": "scorer", "webhook": "webhook"}.get(action)
    for field, target in targets.items():
        if field == wanted and target is None:
            raise RuleError(field, f"The {action} action needs a {field}.")
        if field != wanted and target is not None:
            raise RuleError(field, f"The {action} action takes no {field}.")
    if queue is not None and queue.project_id != project.pk:
        raise RuleError("queue", "That queue belongs to another project.")
    if webhook is not None and webhook.project_id != project.pk:
        raise RuleError("webhook", "That webhook belongs to another project.")
    if scorer is not None:
        if scorer.project_id not in (None, project.pk):
            raise RuleError("scorer", "That scorer belongs to another project.")
        if not scorer.runs_a_model:
            raise RuleError("scorer", f"{scorer.name} holds imported scores; it cannot run.")
    export = dict(export or {})
    if action == Rule.Action.EXPORT:
        _export_check(project, filters, export)
    elif export:
        raise RuleError("export", f"The {action} action takes no export parameters.")
    return Rule.objects.create(
        project=project,
        name=name,
        selection=selection_definition(filters),
        rate=rate,
        action=action,
        queue=queue,
        scorer=scorer,
        webhook=webhook,
        export=export,
        created_by=user,
    )


def _export_check(project: Project, filters: TrajectoryFilters, export: dict[str, Any]) -> None:
    unknown = sorted(set(export) - EXPORT_PARAMETERS)
    if unknown:
        raise RuleError(
            "export",
            f"Unknown export parameters {', '.join(unknown)}; they are"
            f" {', '.join(sorted(EXPORT_PARAMETERS))}.",
        )
    for needed in ("format", "labels", "neutral"):
        if not export.get(needed):
            raise RuleError("export", f"An export needs {needed}.")
    try:
        if export.get("batch"):
            batch_name_check(str(export["batch"]))
        _export_plan(project, filters, export)
    except (ValueError, TypeError) as error:
        raise RuleError("export", str(error)) from None


def _export_plan(project: Project, filters: TrajectoryFilters, export: dict[str, Any]) -> Any:
    request = export_request_parse(**{k: v for k, v in export.items() if k != "batch"})
    request = dataclasses.replace(request, selection=selection_definition(filters))
    return export_plan_resolve(project, request)


def rule_set_active(*, rule: Rule, active: bool) -> Rule:
    Rule.objects.filter(pk=rule.pk).update(active=active)
    rule.active = active
    return rule


def rules_arrived(arrival: Arrival) -> None:
    """The arrival listener: queue the rules' task if the project has an active rule.
    After the arrival's commit, on its caller's time: one indexed query and, with a
    rule, one message. A broker that is down costs the arrival nothing: the arrival is
    kept (``ArrivalMissed``) and the worker's sweep runs the rules over it once the
    broker is back."""
    from automation.tasks import rules_apply as task

    if not Rule.objects.filter(project_id=arrival.project_id, active=True).exists():
        return
    queued = send_if_up(
        task,
        arrival.project_id,
        list(arrival.trajectory_ids),
        arrival.import_batch_id,
        arrival.source,
        what=f"rules of project {arrival.project_id}",
    )
    if not queued:
        ArrivalMissed.objects.create(
            project_id=arrival.project_id,
            trajectory_ids=list(arrival.trajectory_ids),
            import_batch_id=arrival.import_batch_id,
            source=arrival.source,
        )


# Missed arrivals a sweep takes at most (each one a rules pass).
SWEEP_ARRIVALS = 100


def rules_sweep() -> int:
    """Run the rules over the arrivals whose task the broker did not take (the beat's
    periodic task); how many firings were made. Each missed arrival is taken under a
    row lock that another sweep skips, and removed in the transaction that fires on
    it; firing twice on a trajectory is refused by ``rulefiring_once`` anyway."""
    fired = 0
    for _ in range(SWEEP_ARRIVALS):
        with transaction.atomic():
            missed = (
                ArrivalMissed.objects.select_for_update(skip_locked=True).order_by("pk").first()
            )
            if missed is None:
                break
            fired += rules_apply(
                project_id=missed.project_id,
                trajectory_ids=missed.trajectory_ids,
                import_batch_id=missed.import_batch_id,
                source=missed.source,
            )
            missed.delete()
    return fired


def rules_apply(
    *,
    project_id: int,
    trajectory_ids: Sequence[int] = (),
    import_batch_id: int | None = None,
    source: str = "",
) -> int:
    """Run every active rule of the project over the arrived trajectories (the task's
    body); how many firings were made."""
    project = Project.objects.get(pk=project_id)
    fired = 0
    rules = Rule.objects.filter(project=project, active=True).select_related(
        "project", "queue", "scorer", "webhook"
    )
    for rule in rules.order_by("pk"):
        selected = _selected(rule)
        if selected is None:
            continue
        if import_batch_id is not None:
            selected = selected.filter(import_batch_id=import_batch_id)
        else:
            selected = selected.filter(pk__in=list(trajectory_ids))
        for ids in _chunks(selected.order_by("pk").values_list("pk", flat=True)):
            fired += rule_fire(
                rule=rule, trajectory_ids=ids, trigger=RuleFiring.Trigger.ARRIVAL, source=source
            )
    return fired


def rule_backfill_start(*, rule: Rule) -> None:
    """Queue a backfill: the rule runs over every trajectory of the project it selects."""
    from automation.tasks import rule_backfill as task

    broker_require()
    pk = rule.pk
    transaction.on_commit(lambda: task.delay(pk))


def rule_backfill(*, rule_id: int) -> int:
    """The backfill's body: how many firings it made."""
    rule = Rule.objects.select_related("project", "queue", "scorer", "webhook").get(pk=rule_id)
    selected = _selected(rule)
    if selected is None:
        return 0
    fired = 0
    for ids in _chunks(selected.order_by("pk").values_list("pk", flat=True)):
        fired += rule_fire(
            rule=rule, trajectory_ids=ids, trigger=RuleFiring.Trigger.BACKFILL, source="backfill"
        )
    return fired


def _selected(rule: Rule) -> Any:
    try:
        filters = selection_parse(rule.selection)
        selection_check(rule.project, filters)
    except SelectionError as error:
        Rule.objects.filter(pk=rule.pk).update(last_error=f"Its selection no longer holds: {error}")
        return None
    return trajectories_filtered(rule.project, filters)


def _chunks(ids: Any) -> Iterator[list[int]]:
    chunk: list[int] = []
    for pk in ids.iterator(chunk_size=FIRE_CHUNK):
        chunk.append(pk)
        if len(chunk) == FIRE_CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def rule_fire(*, rule: Rule, trajectory_ids: Sequence[int], trigger: str, source: str) -> int:
    """Act on the trajectories the rule's sampling keeps and it has not acted on yet;
    how many. An action that fails is kept as the rule's ``last_error`` and rolls back
    the firings with it."""
    kept = [pk for pk in trajectory_ids if sample_keeps(rule.pk, pk, rule.rate)]
    if not kept:
        return 0
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO automation_rulefiring"
                    " (rule_id, trajectory_id, trigger, source, result, fired_at)"
                    " SELECT %s, t, %s, %s, '{}'::jsonb, now() FROM unnest(%s::bigint[]) AS t"
                    " ON CONFLICT (rule_id, trajectory_id) DO NOTHING RETURNING trajectory_id",
                    [rule.pk, trigger, source, kept],
                )
                new = sorted(row[0] for row in cursor.fetchall())
            if not new:
                return 0
            result = _act(rule, new)
            RuleFiring.objects.filter(rule=rule, trajectory_id__in=new).update(result=result)
            event_emit(
                project_id=rule.project_id,
                kind="rule.fired",
                data={
                    "rule": rule.pk,
                    "name": rule.name,
                    "action": rule.action,
                    "trigger": trigger,
                    "trajectories": new,
                    "result": result,
                },
            )
            if rule.last_error:
                Rule.objects.filter(pk=rule.pk).update(last_error="")
    except (ScoringError, QueueUnavailable, SelectionError, ValueError) as error:
        logger.warning("rule %s did not act: %s", rule.pk, error)
        Rule.objects.filter(pk=rule.pk).update(last_error=str(error)[:2000])
        return 0
    return len(new)


def _act(rule: Rule, trajectory_ids: list[int]) -> dict[str, Any]:
    """Do the rule's action on ``trajectory_ids``; what it did, for its firings."""
    if rule.action == Rule.Action.QUEUE:
        assert rule.queue is not None
        added = queue_items_insert(
            queue=rule.queue,
            ranked_sql=(
                "SELECT t AS trajectory_id, t AS rank FROM unnest(%s::bigint[]) AS t"
                " WHERE NOT EXISTS (SELECT 1 FROM labeling_queueitem i"
                " WHERE i.queue_id = %s AND i.trajectory_id = t)"
            ),
            params=[trajectory_ids, rule.queue.pk],
        )
        return {"queue": rule.queue.pk, "queue_name": rule.queue.name, "added": added}
    if rule.action == Rule.Action.SCORE:
        assert rule.scorer is not None
        run = scoring_run_start(
            project=rule.project, scorer=rule.scorer, trajectory_ids=trajectory_ids
        )
        return {"scoring_run": run.pk, "scorer": rule.scorer.name}
    if rule.action == Rule.Action.EXPORT:
        plan = _export_plan(rule.project, selection_parse(rule.selection), rule.export)
        batch = str(rule.export.get("batch") or "")
        job = export_start(plan=plan, user=rule.created_by, batch=batch)  # type: ignore[arg-type]
        return {"export": job.pk, **({"batch": batch} if batch else {})}
    assert rule.webhook is not None
    delivery = webhook_event_record(
        webhook=rule.webhook,
        kind="rule.fired",
        data={"rule": rule.pk, "name": rule.name, "trajectories": trajectory_ids},
    )
    return {"webhook": rule.webhook.pk, "delivery": delivery.message_id}
