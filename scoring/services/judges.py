"""Writes for LLM judges: a judge (a scorer of kind ``llm-judge``) with its first prompt
version, new prompt versions, and the work of one chunk of a judge run on a worker.

A chunk's replies are stored one by one as they arrive (each its own row, unique per run
and request), so a chunk redelivered after its worker died asks again only the requests
that have no reply. The step scores, the chunk and the run's progress and cost then
change together in the chunk's finishing transaction (``scores._chunk_finish``), as for
every scorer.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Max, Sum

from scoring import prm
from scoring.judges.backend import JudgeSpec, Reply, judge_load
from scoring.judges.config import (
    DEFAULT_SYSTEM,
    DEFAULT_TEMPLATES,
    JudgeError,
    JudgeParams,
    judge_params,
    template_check,
)
from scoring.judges.modes import JudgeRequest, Prompt, requests_build, step_values
from scoring.judges.verdicts import Verdict, verdict_read
from scoring.models import JudgePrompt, JudgeReply, Scorer, ScoringChunk, ScoringRun
from stepscope.jobs.models import ACTIVE
from trajectories.models import Project


class JudgeStopped(Exception):
    """The run ended (cancelled or failed elsewhere) while this chunk was asking."""


def judge_params_for(scorer: Scorer) -> JudgeParams:
    return judge_params(scorer.parameters)


def judge_params_check(parameters: dict[str, Any]) -> None:
    """Raise :class:`JudgeError` for parameters a judge cannot run with."""
    judge_params(parameters)


def judge_spec(scorer: Scorer) -> JudgeSpec:
    return JudgeSpec(
        model_ref=scorer.model_ref,
        params=judge_params_for(scorer),
        revision=scorer.revision,
        trust_remote_code=scorer.trust_remote_code,
    )


def judge_create(
    *,
    name: str,
    model_ref: str,
    project: Project | None = None,
    parameters: dict[str, Any] | None = None,
    system: str | None = None,
    template: str | None = None,
    queue: str = "gpu",
    revision: str = "",
    trust_remote_code: bool = False,
    user: User | None = None,
) -> Scorer:
    """A judge and its prompt version 1 (the mode's default prompt where none is given)."""
    from scoring.services.scores import scorer_create

    with transaction.atomic():
        scorer = scorer_create(
            name=name,
            kind=prm.LLM_JUDGE,
            model_ref=model_ref,
            project=project,
            revision=revision,
            parameters=parameters,
            queue=queue,
            trust_remote_code=trust_remote_code,
            user=user,
        )
        judge_prompt_create(scorer=scorer, system=system, template=template, user=user)
    return scorer


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
    from scoring.services.scores import ScoringError

    if scorer.kind != Scorer.Kind.LLM_JUDGE:
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
    from scoring.services.scores import ScoringError

    prompts = scorer.prompts.all()
    prompt = prompts.filter(version=version).first() if version else prompts.first()
    if prompt is None:
        wanted = f"version {version}" if version else "any prompt version"
        raise ScoringError(f"{scorer.name} has no {wanted}")
    return prompt


# --- On a worker -----------------------------------------------------------------------------


def judge_chunk_score(
    run: ScoringRun, chunk: ScoringChunk
) -> tuple[list[prm.StepResult], dict[str, int]]:
    """Ask the judge what this chunk has no reply for yet, store each reply as it comes,
    and return the step values of all the chunk's parsed replies with the chunk's cost.
    Raises :class:`JudgeError` for a bad endpoint, key, model or prompt."""
    from scoring.services.scores import _trajectory_inputs

    assert run.scorer is not None and run.prompt is not None
    spec = judge_spec(run.scorer)
    prompt = run.prompt
    requests = requests_build(
        spec.params, Prompt(prompt.system, prompt.template), _trajectory_inputs(chunk)
    )
    by_key = {r.key: r for r in requests}
    answered = set(
        JudgeReply.objects.filter(run=run, key__in=list(by_key)).values_list("key", flat=True)
    )
    todo = [r for r in requests if r.key not in answered]
    retries = 0
    if todo:
        judge = judge_load(spec)

        def store(request: JudgeRequest, reply: Reply) -> None:
            if not ScoringRun.objects.filter(pk=run.pk, status__in=ACTIVE).exists():
                raise JudgeStopped
            _reply_store(run, spec.params, request, reply)

        judge.judge(todo, store)
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
    totals = replies.aggregate(prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"))
    cost = {
        "calls": replies.count(),
        "prompt_tokens": int(totals["prompt"] or 0),
        "completion_tokens": int(totals["completion"] or 0),
        "parse_failures": replies.exclude(parse_error="").count(),
        "retries": retries,
    }
    return results, cost


def _reply_store(run: ScoringRun, params: JudgeParams, request: JudgeRequest, reply: Reply) -> None:
    verdict = verdict_read(params, reply.text, list(reply.tokens) if reply.tokens else None)
    _, problem = step_values(params, request, verdict)
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
