"""Writes for LLM judges: a judge (a scorer of kind ``llm-judge``) with its first prompt
version, new prompt versions, and the work of one chunk of a judge run on a worker.

A chunk's replies are stored one by one as they arrive (each its own row, unique per run
and request), so a chunk redelivered after its worker died asks again only the requests
that have no reply. The step scores (or, in a failure-attribution mode, the
``FailureVerdict``s), the chunk and the run's progress and cost then change together in
the chunk's finishing transaction (``scores._chunk_finish``), as for every scorer.

Before a run's first chunk asks anything, :func:`judge_run_check` counts every prompt
the run could send (all its chunks') against the judge's context. What a prompt too long
does is the run's ``on_too_long``: ``skip`` (the default) leaves its step (or trajectory)
without a verdict and the run lists it with the reason (``metrics["skipped"]``, shown on
the run's row and in the API), the rest of the run goes on; ``fail`` fails the run naming
it, with nothing written. A prompt the endpoint refuses as too long only when asked (a
remote judge without a tokenizer counts the run's longest prompts, not all) is treated
the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Unpack

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Max, QuerySet, Sum

from labeling.models import Rubric
from labeling.selectors.rubrics import rubrics_active
from scoring import prm
from scoring.judges.backend import Judge, JudgeSpec, Reply, TooLong, judge_load
from scoring.judges.config import (
    DEFAULT_SYSTEM,
    DEFAULT_TEMPLATES,
    JudgeError,
    JudgeParams,
    PromptTooLong,
    judge_params,
    template_check,
)
from scoring.judges.modes import (
    Attribution,
    JudgeRequest,
    Log,
    LogStep,
    Prompt,
    attribution_first,
    attribution_next,
    attribution_problem,
    requests_build,
    step_values,
)
from scoring.judges.replies import Verdict, verdict_read
from scoring.judges.rubric import RubricAnswer, rubric_read, rubric_request
from scoring.models import (
    FailureVerdict,
    JudgePrompt,
    JudgeReply,
    JudgeRubricMark,
    Scorer,
    ScoringChunk,
    ScoringRun,
)
from scoring.references import ReferenceFields
from scoring.services.failure_attributions import VerdictInput
from scoring.services.rubric_marks import RubricMarkInput
from scoring.services.runners import (
    ChunkOutcome,
    RunOptions,
    RunRefused,
    RunStopped,
    ScoringError,
    trajectory_inputs,
)
from scoring.services.scores import scorer_create
from stepscope.jobs.models import ACTIVE
from trajectories.agents import agent_name, step_agent
from trajectories.models import Project, Step, Trajectory


class JudgeStopped(RunStopped):
    """The run ended (cancelled or failed elsewhere) while this chunk was asking."""


# What a judge run does with a prompt longer than the judge's context.
ON_TOO_LONG = ("skip", "fail")
# The over-long prompts the run's check found that chunks are told of.
TOO_LONG_KEPT = 500


def judge_on_too_long(run: ScoringRun) -> str:
    return str((run.parameters or {}).get("on_too_long", "skip"))


def judge_params_for(scorer: Scorer) -> JudgeParams:
    return judge_params(scorer.parameters)


def judge_spec(scorer: Scorer) -> JudgeSpec:
    return JudgeSpec(
        model_ref=scorer.model_ref,
        params=judge_params_for(scorer),
        revision=scorer.revision,
        trust_remote_code=scorer.trust_remote_code,
    )


def judge_create(
    *,
    system: str | None = None,
    template: str | None = None,
    **fields: Unpack[ReferenceFields],
) -> Scorer:
    """A judge and its prompt version 1 (the mode's default prompt where none is given)."""
    return scorer_create(
        kind=prm.LLM_JUDGE, prompt={"system": system, "template": template}, **fields
    )


def judge_prompt_create(
    *,
    scorer: Scorer,
    system: str | None = None,
    template: str | None = None,
    note: str = "",
    example_steps: list[int] | None = None,
    user: User | None = None,
) -> JudgePrompt:
    """The judge's next prompt version. ``None`` takes the mode's default text; an unknown
    placeholder or unbalanced brace is refused here, naming it. ``example_steps`` are the
    steps the text shows as few-shot examples (``services/judge_examples.py``)."""
    if not prm.kind_get(scorer.kind).prompts:
        raise ScoringError(f"{scorer.name} is not an llm-judge; only judges have prompts")
    mode = judge_params_for(scorer).mode
    system = DEFAULT_SYSTEM if system is None else system
    template = DEFAULT_TEMPLATES[mode] if template is None else template
    if not template.strip():
        raise ScoringError("template: a prompt needs a template")
    try:
        template_check(mode, system, template)
    except JudgeError as error:
        raise ScoringError(str(error)) from None
    with transaction.atomic():
        Scorer.objects.select_for_update().filter(pk=scorer.pk).first()
        latest = scorer.prompts.aggregate(latest=Max("version"))["latest"] or 0
        return JudgePrompt.objects.create(
            scorer=scorer,
            version=latest + 1,
            system=system,
            template=template,
            note=note,
            example_steps=list(example_steps or []),
            created_by=user,
        )


def judge_prompt_for_run(scorer: Scorer, version: int | None) -> JudgePrompt:
    """The prompt version a new run asks with: ``version``, or the newest."""
    prompts = scorer.prompts.all()
    prompt = prompts.filter(version=version).first() if version else prompts.first()
    if prompt is None:
        wanted = f"version {version}" if version else "any prompt version"
        raise ScoringError(f"{scorer.name} has no {wanted}")
    return prompt


# --- On a worker -----------------------------------------------------------------------------


def judge_run_check(run: ScoringRun) -> None:
    """Count every prompt of the run against the judge's context before anything is
    asked, once per run (the first chunk to start does it, holding the run's row; the
    others wait for it and then skip it). A run that fails on a prompt too long raises
    :class:`JudgeError` naming the first such step or trajectory; nothing is stored then.
    A run that skips them keeps what it found (``metrics["too_long"]``, key to reason) for
    its chunks, which leave them out."""
    assert run.scorer is not None and run.prompt is not None
    with transaction.atomic():
        locked = ScoringRun.objects.select_for_update().get(pk=run.pk)
        if locked.status not in ACTIVE or "prompts_checked" in (locked.metrics or {}):
            return
        spec = judge_spec(run.scorer)
        prompt = Prompt(run.prompt.system, run.prompt.template)
        judge = judge_load(spec)
        checked = 0
        too_long: list[TooLong] = []
        for chunk in run.chunks.order_by("number").iterator(chunk_size=50):
            if spec.params.attribution:
                requests = [
                    r for log in _logs(chunk) for r in attribution_first(spec.params, prompt, log)
                ]
            elif spec.params.rubric:
                criteria = _run_rubric(locked).criteria
                requests = [rubric_request(prompt, log, criteria) for log in _logs(chunk)]
            else:
                requests = requests_build(spec.params, prompt, trajectory_inputs(chunk))
            too_long += judge.check(requests)
            checked += len(requests)
        too_long += judge.check_finish()
        if too_long and judge_on_too_long(locked) == "fail":
            raise PromptTooLong(too_long[0].request, too_long[0].reason)
        metrics = {**(locked.metrics or {}), "prompts_checked": checked}
        if too_long:
            metrics["too_long"] = {t.request.key: t.reason for t in too_long[:TOO_LONG_KEPT]}
        locked.metrics = metrics
        locked.save(update_fields=["metrics"])


class _Skipping:
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


def judge_chunk_score(run: ScoringRun, chunk: ScoringChunk) -> ChunkOutcome:
    """Ask the judge what this chunk has no reply for yet, store each reply as it comes,
    and return what all the chunk's parsed replies give, with the chunk's cost. Raises
    :class:`JudgeError` for a bad endpoint, key, model or prompt."""
    assert run.scorer is not None and run.prompt is not None
    spec = judge_spec(run.scorer)
    prompt = run.prompt
    if spec.params.attribution:
        return _attribution_chunk(run, chunk, spec)
    if spec.params.rubric:
        return _rubric_chunk(run, chunk, spec)
    requests = requests_build(
        spec.params, Prompt(prompt.system, prompt.template), trajectory_inputs(chunk)
    )
    by_key = {r.key: r for r in requests}
    answered = set(
        JudgeReply.objects.filter(run=run, key__in=list(by_key)).values_list("key", flat=True)
    )
    todo = [r for r in requests if r.key not in answered]
    retries = 0
    skipping = _Skipping(run)
    if todo:
        judge = judge_load(spec)
        todo = skipping.left(judge, todo)
        judge.judge(todo, _storing(run, spec.params), skipping.on_too_long)
        retries = int(getattr(judge, "retries", 0))
    replies = JudgeReply.objects.filter(run=run, key__in=list(by_key))
    results: list[prm.StepResult] = []
    for reply in replies.only("id", "key", "verdict", "value", "parse_error", "critique"):
        if reply.parse_error:
            continue
        stored = Verdict(reply.verdict, reply.value, reply.critique)
        values, _ = step_values(spec.params, by_key[reply.key], stored)
        for step, value in values.items():
            results.append(
                prm.StepResult(step, value, {"verdict": reply.verdict, "reply": reply.pk})
            )
    return ChunkOutcome(results, _cost(replies, retries), skipped=skipping.listed())


def _storing(
    run: ScoringRun,
    params: JudgeParams,
    answers: dict[str, Verdict] | None = None,
) -> Any:
    def store(request: JudgeRequest, reply: Reply) -> None:
        if not ScoringRun.objects.filter(pk=run.pk, status__in=ACTIVE).exists():
            raise JudgeStopped
        verdict = _reply_store(run, params, request, reply)
        if answers is not None:
            answers[request.key] = verdict

    return store


def _cost(replies: Any, retries: int) -> dict[str, int]:
    totals = replies.aggregate(prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"))
    return {
        "calls": replies.count(),
        "prompt_tokens": int(totals["prompt"] or 0),
        "completion_tokens": int(totals["completion"] or 0),
        "parse_failures": replies.exclude(parse_error="").count(),
        "retries": retries,
    }


def _logs(chunk: ScoringChunk) -> list[Log]:
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


def _attribution_chunk(run: ScoringRun, chunk: ScoringChunk, spec: JudgeSpec) -> ChunkOutcome:
    """Walk each log of the chunk as its mode says, in rounds: each round asks every
    unfinished log's next request together (batched locally, concurrent remotely),
    stored as it comes; the stored replies decide what is next, so a redelivered chunk
    resumes where its replies end."""
    assert run.prompt is not None
    params = spec.params
    prompt = Prompt(run.prompt.system, run.prompt.template)
    logs = _logs(chunk)
    stored = JudgeReply.objects.filter(run=run, trajectory_id__in=chunk.trajectory_ids)
    answers: dict[str, Verdict] = {}
    for key, text, error in stored.values_list("key", "text", "parse_error"):
        verdict = verdict_read(params, text)
        answers[key] = dataclasses.replace(verdict, error=error) if error else verdict
    judge = None
    retries = 0
    outcomes: dict[int, Attribution | None] = {}
    skipping = _Skipping(run)
    while True:
        needed: list[JudgeRequest] = []
        for log in logs:
            if log.key in outcomes:
                continue
            following = attribution_next(params, prompt, log, answers)
            if isinstance(following, JudgeRequest):
                needed.append(following)
            else:
                outcomes[log.key] = following
        if not needed:
            break
        if judge is None:
            judge = judge_load(spec)
        asked = skipping.left(judge, needed)
        judge.judge(asked, _storing(run, params, answers), skipping.on_too_long)
        # A log whose next prompt is too long gets no verdict (its request has no
        # answer, so asking again would ask the same).
        for request in needed:
            if request.key in skipping.found:
                outcomes[request.trajectory] = None
    if judge is not None:
        retries = int(getattr(judge, "retries", 0))
    verdicts = [
        VerdictInput(trajectory_id=a.trajectory, agent=a.agent, step=a.step, reason=a.reason)
        for a in outcomes.values()
        if a is not None
    ]
    cost = _cost(stored, retries)
    cost["verdicts"] = len(verdicts)
    return ChunkOutcome([], cost, verdicts, skipped=skipping.listed())


def _reply_store(
    run: ScoringRun, params: JudgeParams, request: JudgeRequest, reply: Reply
) -> Verdict:
    if "\x00" in reply.text:
        # PostgreSQL text cannot hold NUL, and a model (the random tiny one did) may
        # write it: stored, and read, as U+FFFD.
        reply = dataclasses.replace(reply, text=reply.text.replace("\x00", "\ufffd"))
    verdict = verdict_read(params, reply.text, list(reply.tokens) if reply.tokens else None)
    if params.attribution:
        problem = verdict.error or attribution_problem(request, verdict)
    else:
        _, problem = step_values(params, request, verdict)
    _reply_save(run, request, reply, verdict, problem)
    return dataclasses.replace(verdict, error=problem) if problem else verdict


def _reply_save(
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


# --- The rubric mode ---------------------------------------------------------------------------


def _run_rubric(run: ScoringRun) -> Rubric:
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


def _rubric_chunk(run: ScoringRun, chunk: ScoringChunk, spec: JudgeSpec) -> ChunkOutcome:
    """Ask for each trajectory of the chunk that has no reply yet, storing each reply as
    it comes (read strictly: an unreadable one keeps its text and error, counted in
    ``parse_failures``), then return the marks every readable reply of the chunk gives."""
    assert run.prompt is not None
    rubric = _run_rubric(run)
    prompt = Prompt(run.prompt.system, run.prompt.template)
    logs = {log.key: log for log in _logs(chunk)}
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
        _reply_save(run, request, reply, verdict, answer.error)

    answered = set(
        JudgeReply.objects.filter(run=run, key__in=[r.key for r in requests]).values_list(
            "key", flat=True
        )
    )
    todo = [r for r in requests if r.key not in answered]
    retries = 0
    skipping = _Skipping(run)
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
    cost = _cost(replies, retries)
    cost["rubric_marks"] = len(marks)
    return ChunkOutcome([], cost, rubric_marks=marks, skipped=skipping.listed())


class JudgeRunner:
    """The runs of an llm-judge (the kind's ``runner``): each asks with one prompt
    version and says what it does with a prompt too long; each chunk first has the run's
    prompts counted (once per run), then asks what has no reply yet."""

    def run_options(
        self,
        scorer: Scorer,
        *,
        project: Project,
        prompt_version: int | None,
        on_too_long: str | None,
        rubric: str | None = None,
    ) -> RunOptions:
        prompt = judge_prompt_for_run(scorer, prompt_version)
        params = judge_params_for(scorer)
        parameters: dict[str, Any] = {}
        if params.rubric:
            filled = judge_rubric_for_run(project, rubric)
            parameters = {"rubric_id": filled.pk, "rubric": filled.name}
        elif rubric is not None:
            raise ScoringError(
                f"{scorer.name} is in mode {params.mode!r}; only a judge in mode 'rubric'"
                " fills a rubric",
                field="rubric",
            )
        on_too_long = on_too_long or "skip"
        if on_too_long not in ON_TOO_LONG:
            raise ScoringError(
                f"on_too_long is {on_too_long!r}; use {' or '.join(ON_TOO_LONG)}",
                field="on_too_long",
            )
        metrics: dict[str, Any] = {"mode": params.mode, "prompt_version": prompt.version}
        if params.rubric:
            metrics["rubric"] = f"{parameters['rubric']} v{filled.version}"
        return RunOptions(
            prompt=prompt,
            metrics=metrics,
            parameters={"on_too_long": on_too_long, **parameters},
        )

    def chunk(self, run: ScoringRun, chunk: ScoringChunk) -> ChunkOutcome:
        try:
            judge_run_check(run)  # every prompt of the run, before this chunk asks any
            return judge_chunk_score(run, chunk)
        except JudgeError as error:
            raise RunRefused(str(error)) from error

    def judged(self, run: ScoringRun) -> QuerySet[Any] | None:
        assert run.scorer is not None
        params = judge_params_for(run.scorer)
        if params.attribution:
            return FailureVerdict.objects.filter(scorer=run.scorer)
        if params.rubric:
            return JudgeRubricMark.objects.filter(
                scorer=run.scorer, rubric_id=run.parameters.get("rubric_id")
            )
        return None

    def created(
        self, scorer: Scorer, *, prompt: Mapping[str, Any] | None, user: User | None
    ) -> None:
        prompt = prompt or {}
        judge_prompt_create(
            scorer=scorer, system=prompt.get("system"), template=prompt.get("template"), user=user
        )


JUDGE_RUNNER = JudgeRunner()
