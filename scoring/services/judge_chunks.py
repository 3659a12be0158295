"""What every kind of judge chunk shares: the chunk's trajectories as logs, the prompts
too long to ask (skipped, or the run fails on them), each reply saved as it comes (so a
redelivered chunk asks only what has none), and the chunk's cost. Used by
``judges.py`` (step, outcome and attribution modes) and ``judge_rubrics.py``."""

from __future__ import annotations

from typing import Any

from django.db.models import Sum

from scoring.judges.backend import Judge, Reply, TooLong
from scoring.judges.modes import JudgeRequest, Log, LogStep
from scoring.judges.replies import Verdict
from scoring.models import JudgeReply, ScoringChunk, ScoringRun
from scoring.services.runners import RunStopped
from trajectories.agents import agent_name, step_agent
from trajectories.models import Step, Trajectory


class JudgeStopped(RunStopped):
    """The run ended (cancelled or failed elsewhere) while this chunk was asking."""


def judge_on_too_long(run: ScoringRun) -> str:
    return str((run.parameters or {}).get("on_too_long", "skip"))


class ChunkSkipping:
    """The over-long prompts of one chunk: those the run's check found, those the judge
    finds counting the chunk's own (exactly, where it has a tokenizer), and those the
    endpoint refuses when asked. ``on_too_long`` is the judge's callback: None where the
    run fails on them instead."""

    def __init__(self, run: ScoringRun) -> None:
        metrics = ScoringRun.objects.filter(pk=run.pk).values_list("metrics", flat=True).first()
        self.known: dict[str, str] = dict((metrics or {}).get("too_long") or {})
        self.skips = judge_on_too_long(run) == "skip"
        self.found: dict[str, TooLong] = {}

    def left(self, judge: Judge, requests: list[JudgeRequest]) -> list[JudgeRequest]:
        """``requests`` without those too long (each noted)."""
        if not self.skips:
            return requests
        for request in requests:
            if request.key in self.known:
                self.note(TooLong(request, self.known[request.key]))
        fresh = [r for r in requests if r.key not in self.found]
        for too_long in judge.check(fresh):
            self.note(too_long)
        return [r for r in fresh if r.key not in self.found]

    def note(self, too_long: TooLong) -> None:
        self.found.setdefault(too_long.request.key, too_long)

    @property
    def on_too_long(self) -> Any:
        return self.note if self.skips else None

    def listed(self) -> list[dict[str, Any]]:
        return [
            {"trajectory": t.request.trajectory, "step": t.request.step, "reason": t.reason}
            for t in self.found.values()
        ]


def replies_cost(replies: Any, retries: int) -> dict[str, int]:
    totals = replies.aggregate(prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"))
    return {
        "calls": replies.count(),
        "prompt_tokens": int(totals["prompt"] or 0),
        "completion_tokens": int(totals["completion"] or 0),
        "parse_failures": replies.exclude(parse_error="").count(),
        "retries": retries,
    }


def chunk_logs(chunk: ScoringChunk) -> list[Log]:
    """The chunk's trajectories as whole multi-agent logs: every step, numbered by its
    index, with its agent as ``trajectories.agents`` names it (its speaker where the
    step is an input)."""
    tasks_by_id = dict(
        Trajectory.objects.filter(pk__in=chunk.trajectory_ids)
        .order_by("pk")
        .values_list("pk", "task")
    )
    rows: dict[int, list[tuple[int, int, str, str, str, bool]]] = {pk: [] for pk in tasks_by_id}
    steps = (
        Step.objects.filter(trajectory_id__in=chunk.trajectory_ids)
        .order_by("trajectory_id", "index")
        .values_list("trajectory_id", "pk", "index", "agent", "role", "content", "labelable")
    )
    for trajectory_id, *row in steps.iterator(chunk_size=2000):
        rows[trajectory_id].append(tuple(row))  # type: ignore[arg-type]
    logs = []
    for trajectory_id, items in rows.items():
        named = any(agent for _, _, agent, _, _, _ in items)
        log_steps = []
        for pk, index, agent, role, content, labelable in items:
            # In a log whose steps name agents, a step naming none is an input: shown
            # with its role, never a candidate (as trajectories.agents counts agents).
            acting = bool(agent) or not named
            name = step_agent(agent, role, named=named) if acting else agent_name(role)
            log_steps.append(LogStep(pk, index, name, content, labelable and acting and bool(name)))
        logs.append(Log(trajectory_id, tasks_by_id[trajectory_id], tuple(log_steps)))
    return logs


def judge_reply_save(
    run: ScoringRun, request: JudgeRequest, reply: Reply, verdict: Verdict, problem: str
) -> None:
    assert run.scorer_id is not None and run.prompt_id is not None
    JudgeReply.objects.bulk_create(
        [
            JudgeReply(
                run=run,
                scorer_id=run.scorer_id,
                prompt_id=run.prompt_id,
                key=request.key,
                trajectory_id=request.trajectory,
                step_id=request.step,
                text=reply.text,
                critique=verdict.critique,
                verdict=verdict.verdict if not problem else None,
                value=verdict.value if not problem else None,
                parse_error=problem[:300],
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
                latency_ms=reply.latency_s * 1000,
                finish_reason=reply.finish_reason[:20],
            )
        ],
        ignore_conflicts=True,  # a reply of a redelivered chunk that came back twice
    )
