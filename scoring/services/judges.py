"""Writes for LLM judges: a judge (a scorer of kind ``llm-judge``) with its first prompt
version, new prompt versions, and the work of one chunk of a judge run on a worker. The
rubric mode's chunks are ``judge_rubrics.py``; what every mode's chunk shares (logs,
over-long prompts, saving replies, cost) is ``judge_chunks.py``.

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
from django.db.models import Max, QuerySet

from scoring import prm
from scoring.judges.backend import JudgeSpec, Reply, TooLong, judge_load
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
    Prompt,
    attribution_first,
    attribution_next,
    attribution_problem,
    requests_build,
    step_values,
)
from scoring.judges.replies import Verdict, verdict_read
from scoring.judges.rubric import rubric_request
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
from scoring.services.judge_chunks import (
    ChunkSkipping,
    JudgeStopped,
    chunk_logs,
    judge_on_too_long,
    judge_reply_save,
    replies_cost,
)
from scoring.services.judge_rubrics import judge_rubric_for_run, rubric_chunk, run_rubric
from scoring.services.runners import (
    ChunkOutcome,
    RunOptions,
    RunRefused,
    ScoringError,
    trajectory_inputs,
)
from scoring.services.scores import scorer_create
from stepscope.jobs.models import ACTIVE
from trajectories.models import Project

# What a judge run does with a prompt longer than the judge's context.
ON_TOO_LONG = ("skip", "fail")
# The over-long prompts the run's check found that chunks are told of.
TOO_LONG_KEPT = 500


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
                    r
                    for log in chunk_logs(chunk)
                    for r in attribution_first(spec.params, prompt, log)
                ]
            elif spec.params.rubric:
                criteria = run_rubric(locked).criteria
                requests = [rubric_request(prompt, log, criteria) for log in chunk_logs(chunk)]
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
        return rubric_chunk(run, chunk, spec)
    requests = requests_build(
        spec.params, Prompt(prompt.system, prompt.template), trajectory_inputs(chunk)
    )
    by_key = {r.key: r for r in requests}
    answered = set(
        JudgeReply.objects.filter(run=run, key__in=list(by_key)).values_list("key", flat=True)
    )
    todo = [r for r in requests if r.key not in answered]
    retries = 0
    skipping = ChunkSkipping(run)
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
    return ChunkOutcome(results, replies_cost(replies, retries), skipped=skipping.listed())


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


def _attribution_chunk(run: ScoringRun, chunk: ScoringChunk, spec: JudgeSpec) -> ChunkOutcome:
    """Walk each log of the chunk as its mode says, in rounds: each round asks every
    unfinished log's next request together (batched locally, concurrent remotely),
    stored as it comes; the stored replies decide what is next, so a redelivered chunk
    resumes where its replies end."""
    assert run.prompt is not None
    params = spec.params
    prompt = Prompt(run.prompt.system, run.prompt.template)
    logs = chunk_logs(chunk)
    stored = JudgeReply.objects.filter(run=run, trajectory_id__in=chunk.trajectory_ids)
    answers: dict[str, Verdict] = {}
    for key, text, error in stored.values_list("key", "text", "parse_error"):
        verdict = verdict_read(params, text)
        answers[key] = dataclasses.replace(verdict, error=error) if error else verdict
    judge = None
    retries = 0
    outcomes: dict[int, Attribution | None] = {}
    skipping = ChunkSkipping(run)
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
    cost = replies_cost(stored, retries)
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
    judge_reply_save(run, request, reply, verdict, problem)
    return dataclasses.replace(verdict, error=problem) if problem else verdict


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
