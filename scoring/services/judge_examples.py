"""Few-shot examples for an LLM judge: steps where the judge and a human label source
disagreed, chosen on the judge alignment page, become a NEW prompt version whose
template shows them with the human's label as the right answer (and the human's
rationale where there is one). The version records the example steps
(``JudgePrompt.example_steps``), so its metrics leave their trajectories out: a judge is
not graded on answers it was shown.

The examples go in one block at the top of the template between two marker lines; a
version made from a version that has examples adds to its block, so the examples of
every ancestor stay and are counted once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import connection, transaction

from labeling.models import FinalLabel, StepLabel
from labeling.selectors import active_schema
from labeling.sources import LabelSource, label_source_annotator, label_source_sql
from scoring import prm
from scoring.judges.config import PER_STEP
from scoring.models import JudgePrompt, Scorer
from scoring.services.judges import judge_params_for, judge_prompt_create
from trajectories.models import Project, Step

MAX_EXAMPLES = 8
STEP_CHARS = 1200
HISTORY_STEPS = 3
HISTORY_CHARS = 300
TASK_CHARS = 600
RATIONALE_CHARS = 400
BEGIN = "### Examples a person judged (their verdict is the right answer)"
END = "### End of examples"
VERDICT_NAMES = {1: "correct", 0: "cannot be judged", -1: "wrong"}


@dataclass(frozen=True)
class Example:
    """One example step as the template shows it. ``verdict`` is on the judge's scale:
    +1 correct, 0 cannot be judged, -1 wrong."""

    step: int
    task: str
    history: tuple[str, ...]
    number: int
    text: str
    verdict: int
    rationale: str


def _cut(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _literal(text: str) -> str:
    """Text for a ``str.format`` template: braces doubled, so it stays literal."""
    return text.replace("{", "{{").replace("}", "}}")


def example_text(mode: str, example: Example, number: int, *, boxed: bool) -> str:
    """One example as template text (braces already doubled)."""
    lines = [f"Example {number}", f"Task:\n{_cut(example.task, TASK_CHARS)}"]
    if example.history:
        lines.append("Earlier steps (the last few):\n" + "\n".join(example.history))
    lines.append(f"Step to check (step {example.number}):\n{_cut(example.text, STEP_CHARS)}")
    sign = f"{example.verdict:+d}" if example.verdict else "0"
    verdict = f"A person's verdict on step {example.number}: {VERDICT_NAMES[example.verdict]}"
    if mode == PER_STEP:
        verdict += f", so the answer is \\boxed{{{sign}}}" if boxed else f" ({sign})"
    lines.append(verdict)
    if example.rationale:
        lines.append(f"Their reason: {_cut(example.rationale, RATIONALE_CHARS)}")
    return _literal("\n".join(lines))


def template_with_examples(
    template: str, mode: str, examples: Sequence[Example], *, first: int, boxed: bool
) -> str:
    """``template`` with ``examples`` added to its examples block (made at the top when it
    has none), numbered from ``first``."""
    texts = "\n\n".join(
        example_text(mode, example, first + i, boxed=boxed) for i, example in enumerate(examples)
    )
    if END in template:
        head, _, tail = template.rpartition(END)
        return f"{head.rstrip()}\n\n{texts}\n{END}{tail}"
    return f"{BEGIN}\n\n{texts}\n{END}\n\nNow judge the following.\n\n{template}"


class ExampleError(ValueError):
    """A chosen example cannot be used; the message names the step and what is wrong."""


def step_rationales(
    project: Project, source: LabelSource, step_ids: Sequence[int]
) -> dict[int, str]:
    """The reason a label source's label of each step has, where it has one: the
    annotator's (or import's) rationale, the adjudicator's, or for the majority the
    rationales of the annotators who voted with it (``name: text``, joined)."""
    ids = list(step_ids)
    if not ids:
        return {}
    annotator = label_source_annotator(source)
    if annotator is not None:
        return {
            step: text
            for step, text in StepLabel.objects.filter(
                step_id__in=ids,
                annotator__username=annotator,
                status=StepLabel.Status.SUBMITTED,
            )
            .exclude(rationale="")
            .values_list("step_id", "rationale")
        }
    if source.kind == "human" and source.name == "adjudicated":
        return dict(
            FinalLabel.objects.filter(step_id__in=ids)
            .exclude(rationale="")
            .values_list("step_id", "rationale")
        )
    if not (source.kind == "human" and source.name == "majority"):
        return {}
    majority_sql, params = label_source_sql(project, source)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT l.step_id, u.username, l.rationale FROM labeling_steplabel l"
            " JOIN auth_user u ON u.id = l.annotator_id"
            f" JOIN ({majority_sql}) m ON m.step_id = l.step_id AND m.value = l.value"
            " WHERE l.step_id = ANY(%s) AND l.status = 'submitted' AND l.rationale <> ''"
            " AND u.username NOT LIKE 'import:%%' ORDER BY l.step_id, u.username",
            [*params, ids],
        )
        found: dict[int, list[str]] = {}
        for step, username, text in cursor.fetchall():
            found.setdefault(step, []).append(f"{username}: {text}")
    return {step: "\n".join(texts) for step, texts in found.items()}


def _verdicts(project: Project, source: LabelSource, step_ids: list[int]) -> dict[int, int]:
    """Each step's label from ``source`` on the judge's scale (+1, 0, -1)."""
    sql, params = label_source_sql(project, source)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT r.step_id, r.value FROM ({sql}) r WHERE r.step_id = ANY(%s)",
            [*params, step_ids],
        )
        labels = dict(cursor.fetchall())
    schema = active_schema(project)
    values = [int(e["value"]) for e in schema.entries] if schema else [-1, 1]
    good = max(values, default=1)
    bad = (
        schema.error_value
        if schema is not None and schema.error_value is not None
        else min(values, default=-1)
    )
    return {
        step: 1 if value >= good else -1 if value <= bad else 0 for step, value in labels.items()
    }


def judge_examples_add(
    *,
    project: Project,
    scorer: Scorer,
    base: JudgePrompt,
    step_ids: Sequence[int],
    source: LabelSource,
    user: User | None = None,
) -> JudgePrompt:
    """A new prompt version of ``scorer``: ``base``'s text with ``step_ids`` added as
    few-shot examples, each with ``source``'s label as the right answer. Raises
    :class:`ExampleError` naming the step (or the field) that is wrong; nothing is
    written then."""
    if scorer.kind != prm.LLM_JUDGE:
        raise ExampleError(f"scorer {scorer.name!r} is a {scorer.kind} scorer, not an llm-judge")
    if base.scorer_id != scorer.pk:
        raise ExampleError(f"version: prompt {base.pk} is not a version of {scorer.name!r}")
    chosen = list(dict.fromkeys(int(pk) for pk in step_ids))
    if not chosen:
        raise ExampleError("step: choose at least one disagreement to use as an example")
    if len(chosen) > MAX_EXAMPLES:
        raise ExampleError(
            f"step: at most {MAX_EXAMPLES} examples at a time ({len(chosen)} chosen)"
        )
    already = set(base.example_steps)
    for pk in chosen:
        if pk in already:
            raise ExampleError(f"step {pk} is already an example of version {base.version}")
    steps = {
        s.pk: s
        for s in Step.objects.filter(pk__in=chosen, trajectory__project=project).select_related(
            "trajectory"
        )
    }
    for pk in chosen:
        if pk not in steps:
            raise ExampleError(f"step {pk}: no such step in project {project.slug!r}")
    verdicts = _verdicts(project, source, chosen)
    for pk in chosen:
        if pk not in verdicts:
            raise ExampleError(f"step {pk} has no label from {source}")
    rationales = step_rationales(project, source, chosen)
    history: dict[int, list[str]] = {}
    for step in (
        Step.objects.filter(trajectory_id__in={s.trajectory_id for s in steps.values()})
        .order_by("trajectory_id", "index")
        .values_list("trajectory_id", "index", "content")
    ):
        history.setdefault(step[0], []).append(f"Step {step[1]}: {_cut(step[2], HISTORY_CHARS)}")
    examples = [
        Example(
            step=pk,
            task=steps[pk].trajectory.task,
            history=tuple(
                history[steps[pk].trajectory_id][
                    max(0, steps[pk].index - HISTORY_STEPS) : steps[pk].index
                ]
            ),
            number=steps[pk].index,
            text=steps[pk].content,
            verdict=verdicts[pk],
            rationale=rationales.get(pk, ""),
        )
        for pk in chosen
    ]
    params = judge_params_for(scorer)
    template = template_with_examples(
        base.template,
        params.mode,
        examples,
        first=len(base.example_steps) + 1,
        boxed=not params.verdict_pattern,
    )
    with transaction.atomic():
        return judge_prompt_create(
            scorer=scorer,
            system=base.system,
            template=template,
            note=f"v{base.version} + {len(examples)} example{'s' if len(examples) != 1 else ''}",
            example_steps=[*base.example_steps, *chosen],
            user=user,
        )
