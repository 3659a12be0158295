"""The rubric mode of an LLM judge: a run fills one version of the project's rubric per
trajectory, read strictly as JSON per criterion (an unreadable reply is kept and counted,
never guessed); its marks go to ``JudgeRubricMark`` when the chunk finishes."""

from __future__ import annotations

import dataclasses

from labeling.models import Rubric
from labeling.selectors.rubrics import rubrics_active
from scoring.judges.backend import JudgeSpec, Reply, judge_load
from scoring.judges.modes import JudgeRequest, Prompt
from scoring.judges.replies import Verdict
from scoring.judges.rubric import RubricAnswer, rubric_read, rubric_request
from scoring.models import JudgeReply, ScoringChunk, ScoringRun
from scoring.services.judge_chunks import (
    ChunkSkipping,
    JudgeStopped,
    chunk_logs,
    judge_reply_save,
    replies_cost,
)
from scoring.services.rubric_marks import RubricMarkInput
from scoring.services.runners import ChunkOutcome, ScoringError
from stepscope.jobs.models import ACTIVE
from trajectories.models import Project


def run_rubric(run: ScoringRun) -> Rubric:
    """The rubric version the run fills (recorded when it started)."""
    return Rubric.objects.get(pk=run.parameters["rubric_id"])


def judge_rubric_for_run(project: Project, name: str | None) -> Rubric:
    """The current version of the project's rubric ``name``, or of its one rubric when
    ``name`` is None; a ScoringError (field ``rubric``) names what is missing or the
    rubrics to choose from."""
    current = rubrics_active(project)
    names = ", ".join(repr(r.name) for r in current) or "none"
    if name:
        for rubric in current:
            if rubric.name == name:
                return rubric
        raise ScoringError(
            f"project {project.slug!r} has no rubric named {name!r} (its rubrics: {names})",
            field="rubric",
        )
    if len(current) != 1:
        raise ScoringError(
            f"a rubric judge fills one rubric; project {project.slug!r} has {names}: name one",
            field="rubric",
        )
    return current[0]


def rubric_chunk(run: ScoringRun, chunk: ScoringChunk, spec: JudgeSpec) -> ChunkOutcome:
    """Ask for each trajectory of the chunk that has no reply yet, storing each reply as
    it comes (read strictly: an unreadable one keeps its text and error, counted in
    ``parse_failures``), then return the marks every readable reply of the chunk gives."""
    assert run.prompt is not None
    rubric = run_rubric(run)
    prompt = Prompt(run.prompt.system, run.prompt.template)
    logs = {log.key: log for log in chunk_logs(chunk)}
    requests = [rubric_request(prompt, log, rubric.criteria) for log in logs.values()]

    def read(request: JudgeRequest, text: str) -> RubricAnswer:
        log = logs[request.trajectory]
        return rubric_read(
            text,
            criterion_count=len(rubric.criteria),
            step_indexes=[s.index for s in log.steps],
        )

    def store(request: JudgeRequest, reply: Reply) -> None:
        if not ScoringRun.objects.filter(pk=run.pk, status__in=ACTIVE).exists():
            raise JudgeStopped
        reply = dataclasses.replace(reply, text=reply.text.replace("\x00", "\ufffd"))
        answer = read(request, reply.text)
        met = sum(1 for m in answer.marks if m.mark == "met")
        verdict = Verdict(len(answer.marks) if answer.parsed else None, None, answer.critique)
        if answer.parsed and answer.marks:
            verdict = dataclasses.replace(verdict, value=met / len(answer.marks))
        judge_reply_save(run, request, reply, verdict, answer.error)

    answered = set(
        JudgeReply.objects.filter(run=run, key__in=[r.key for r in requests]).values_list(
            "key", flat=True
        )
    )
    todo = [r for r in requests if r.key not in answered]
    retries = 0
    skipping = ChunkSkipping(run)
    if todo:
        judge = judge_load(spec)
        todo = skipping.left(judge, todo)
        judge.judge(todo, store, skipping.on_too_long)
        retries = int(getattr(judge, "retries", 0))
    by_key = {r.key: r for r in requests}
    replies = JudgeReply.objects.filter(run=run, key__in=list(by_key))
    marks: list[RubricMarkInput] = []
    for pk, key, text, error in replies.values_list("pk", "key", "text", "parse_error"):
        if error:
            continue
        trajectory = by_key[key].trajectory
        for mark in read(by_key[key], text).marks:
            marks.append(RubricMarkInput(trajectory, mark.criterion, mark.mark, mark.evidence, pk))
    cost = replies_cost(replies, retries)
    cost["rubric_marks"] = len(marks)
    return ChunkOutcome([], cost, rubric_marks=marks, skipped=skipping.listed())
