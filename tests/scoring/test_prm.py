"""The Django-free PRM adapters on tiny random models loaded from disk: where scores are
read, what a step may see, truncation, batching, out-of-memory, the trained head."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from scoring.prm import (
    CHAT_TURN_LM,
    SEQUENCE_CLASSIFIER,
    STEP_TAG_LM,
    TOKEN_CLASSIFICATION,
    TRAINED_HEAD,
    ScorerError,
    ScorerSpec,
    StepInput,
    TrajectoryInput,
    adapters,
    params_for_kind,
    tiny,
)
from scoring.prm.adapters import StepScorer, scorer_build
from scoring.prm.cache import LOADED
from scoring.prm.head import Head, LabeledTrajectory, TrainedHeadScorer, in_holdout, train_head
from tests.conftest import REPO_ROOT
from tests.scoring.conftest import TinyModels

STEPS = [
    "Janet has 16 eggs and eats 3, so 16 - 3 = 13 remain.",
    "Tool result: 13",  # not labelable: a tool output
    "She bakes with 4, leaving 13 - 4 = 9 eggs.",
    "She sells 9 eggs at $2 each for 9 * 2 = 18 dollars.",
    "The answer is \\boxed{18}.",
]


def trajectory(
    key: int = 1, steps: list[str] = STEPS, task: str = "How much does Janet make?"
) -> TrajectoryInput:
    return TrajectoryInput(
        key,
        task,
        tuple(
            StepInput(key * 100 + i, text, labelable=i != 1, score=i != 1)
            for i, text in enumerate(steps)
        ),
    )


def many(count: int) -> list[TrajectoryInput]:
    """Trajectories of different lengths, so batches need padding."""
    return [
        trajectory(k, [*STEPS[: 2 + k % 4], f"Extra step {k} " * (k % 5)])
        for k in range(1, count + 1)
    ]


def spec(kind: str, path: Path, **params: Any) -> ScorerSpec:
    return ScorerSpec(kind, str(path), params_for_kind(kind, params))


def model_path(models: TinyModels, kind: str) -> Path:
    return {
        TOKEN_CLASSIFICATION: models.token_classifier,
        STEP_TAG_LM: models.step_tag_lm,
        CHAT_TURN_LM: models.chat_turn_lm,
        SEQUENCE_CLASSIFIER: models.sequence_classifier,
        TRAINED_HEAD: models.encoder,
    }[kind]


def head_artifact(dim: int, seed: int = 0) -> dict[str, Any]:
    weights = np.random.default_rng(seed).normal(size=dim) * 3
    return Head(tuple(float(w) for w in weights), 0.1).to_dict()


def build(models: TinyModels, kind: str, **params: Any) -> StepScorer:
    if kind == TRAINED_HEAD:
        return scorer_build(
            dataclasses.replace(
                spec(kind, models.encoder, **params), artifact=head_artifact(dim=64)
            )
        )
    return scorer_build(spec(kind, model_path(models, kind), **params))


def by_key(results: list[Any]) -> dict[int, float]:
    return {r.key: r.value for r in results}


ALL_KINDS = [TOKEN_CLASSIFICATION, STEP_TAG_LM, CHAT_TURN_LM, SEQUENCE_CLASSIFIER, TRAINED_HEAD]


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_one_score_per_labelable_step_and_none_for_others(
    tiny_models: TinyModels, kind: str
) -> None:
    results = build(tiny_models, kind).score([trajectory()])
    assert sorted(r.key for r in results) == [100, 102, 103, 104]
    assert all(0 <= r.value <= 1 for r in results)
    assert len({round(r.value, 6) for r in results}) > 1  # a real model output, not constant
    assert not any(r.truncated for r in results)


@pytest.mark.parametrize("kind", [TOKEN_CLASSIFICATION, STEP_TAG_LM])
def test_scores_are_read_at_the_marker_after_each_step(tiny_models: TinyModels, kind: str) -> None:
    scorer = build(tiny_models, kind)
    marker = tiny.SEPARATOR if kind == TOKEN_CLASSIFICATION else tiny.STEP_TAG
    marker_id = scorer.tokenizer.convert_tokens_to_ids(marker)  # type: ignore[attr-defined]
    (sequence,) = scorer.encode([trajectory()])
    # One whole-trajectory pass (the tiny models are causal), one read per labelable step.
    assert [sequence.ids[r.position] for r in sequence.reads] == [marker_id] * 4
    assert list(sequence.ids).count(marker_id) == 4  # no marker after the tool output
    assert sequence.reads[-1].position == len(sequence.ids) - 1


def test_a_separator_inside_a_step_is_not_a_marker(tiny_models: TinyModels) -> None:
    scorer = build(tiny_models, TOKEN_CLASSIFICATION)
    tricky = trajectory(steps=["a <extra_0> b", "tool", "c", "d", "e"])
    (sequence,) = scorer.encode([tricky])
    separator = scorer.tokenizer.convert_tokens_to_ids(tiny.SEPARATOR)  # type: ignore[attr-defined]
    assert list(sequence.ids).count(separator) == 5
    # The read for step 0 is its trailing marker, not the one inside its text.
    first = sequence.reads[0].position
    assert sequence.ids[first] == separator and sequence.ids[first - 1] != separator


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_a_step_never_sees_later_steps(tiny_models: TinyModels, kind: str) -> None:
    scorer = build(tiny_models, kind)
    base = by_key(scorer.score([trajectory()]))
    changed_steps = [*STEPS[:3], "Something else entirely, and wrong.", "The answer is 42."]
    changed = by_key(scorer.score([trajectory(steps=changed_steps)]))
    for key in (100, 102):
        assert changed[key] == pytest.approx(base[key], abs=1e-5)
    assert changed[103] != pytest.approx(base[103], abs=1e-5)


def test_a_bidirectional_token_classifier_scores_each_prefix(tmp_path: Path) -> None:
    from transformers import BertConfig, BertForTokenClassification

    tokenizer = tiny.build_tokenizer(bert_style=True)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        initializer_range=0.2,
    )
    config.num_labels = 2
    BertForTokenClassification(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    scorer = scorer_build(spec(TOKEN_CLASSIFICATION, tmp_path))
    assert scorer.whole_trajectory is False  # type: ignore[attr-defined]
    base = by_key(scorer.score([trajectory()]))
    changed = by_key(scorer.score([trajectory(steps=[*STEPS[:3], "No.", "No."])]))
    assert changed[100] == pytest.approx(base[100], abs=1e-5)
    assert changed[102] == pytest.approx(base[102], abs=1e-5)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_long_prefixes_are_cut_from_the_left_and_say_so(tiny_models: TinyModels, kind: str) -> None:
    full = build(tiny_models, kind, max_length=4096)
    lengths = {r.key: r.raw["tokens"] for r in full.score([trajectory()])}
    limit = 24
    short = build(tiny_models, kind, max_length=limit)
    sequences = short.encode([trajectory()])
    assert max(len(s) for s in sequences) <= limit
    results = {r.key: r for r in short.run(sequences)}
    assert set(results) == {100, 102, 103, 104}
    for key, result in results.items():
        if lengths[key] > limit:
            assert result.truncated
            # The trained head's pair also loses the separator after a dropped context.
            slack = 1 if kind == TRAINED_HEAD else 0
            expected = lengths[key] - limit
            assert expected - slack <= result.raw["dropped_tokens"] <= expected
        else:
            assert not result.truncated
            assert result.value == pytest.approx(by_key(full.score([trajectory()]))[key], abs=1e-5)
    assert any(r.truncated for r in results.values())


def test_truncation_keeps_the_step_end(tiny_models: TinyModels) -> None:
    scorer = build(tiny_models, TOKEN_CLASSIFICATION, max_length=8)
    separator = scorer.tokenizer.convert_tokens_to_ids(tiny.SEPARATOR)  # type: ignore[attr-defined]
    for sequence in scorer.encode([trajectory()]):
        assert len(sequence) <= 8
        assert all(sequence.ids[r.position] == separator for r in sequence.reads)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_batch_size_does_not_change_scores(tiny_models: TinyModels, kind: str) -> None:
    items = many(20)
    one = by_key(build(tiny_models, kind, batch_size=1).score(items))
    sixteen = by_key(build(tiny_models, kind, batch_size=16).score(items))
    assert one.keys() == sixteen.keys()
    for key, value in one.items():
        assert sixteen[key] == pytest.approx(value, abs=1e-5)


def test_token_budget_caps_batches(tiny_models: TinyModels) -> None:
    scorer = build(tiny_models, SEQUENCE_CLASSIFIER, batch_size=64, max_batch_tokens=200)
    for batch in scorer.batches(scorer.encode(many(20))):
        assert len(batch) == 1 or len(batch) * len(batch[0]) <= 200


def test_step_tag_scores_match_the_full_lm_softmax(tiny_models: TinyModels) -> None:
    scorer = build(tiny_models, STEP_TAG_LM)
    (sequence,) = scorer.encode([trajectory()])
    with torch.inference_mode():
        logits = scorer.model(input_ids=torch.tensor([sequence.ids])).logits[0]  # type: ignore[attr-defined]
    plus, minus = scorer.candidates  # type: ignore[attr-defined]
    expected = [
        torch.softmax(logits[r.position, [plus, minus]], dim=-1)[0].item() for r in sequence.reads
    ]
    got = [r.value for r in scorer.forward([sequence])]
    assert got == pytest.approx(expected, abs=1e-5)


def rlhflow_reference(scorer: StepScorer, item: TrajectoryInput) -> dict[int, float]:
    """Scores as RLHFlow's own evaluation code computes them for Llama3.1-8B-PRM-*: one
    chat per step (the task and first step as the first user turn, every step a user turn
    answered "+"), tokenized by the chat template, the "+" / "-" logits at position -3."""
    tokenizer: Any = scorer.tokenizer  # type: ignore[attr-defined]
    model: Any = scorer.model  # type: ignore[attr-defined]
    candidates = [tokenizer.encode("+")[-1], tokenizer.encode("-")[-1]]
    conversation: list[dict[str, str]] = []
    scores = {}
    for k, step in enumerate(s for s in item.steps if s.labelable):
        text = f"{item.task} {step.text}" if k == 0 else step.text
        conversation.append({"content": text, "role": "user"})
        conversation.append({"content": "+", "role": "assistant"})
        input_ids = tokenizer.apply_chat_template(conversation, return_tensors="pt")
        if not isinstance(input_ids, torch.Tensor):  # newer transformers: a BatchEncoding
            input_ids = input_ids["input_ids"]
        with torch.inference_mode():
            logits = model(input_ids).logits[:, -3, candidates]
        scores[step.key] = float(logits.softmax(dim=-1)[0, 0])
    return scores


def test_chat_turn_scores_match_rlhflow_one_chat_per_step(tiny_models: TinyModels) -> None:
    """The RLHFlow PRM read in one pass per trajectory gives, for each step, the score
    of a chat that ends at that step: so it sees no later step."""
    scorer = build(tiny_models, CHAT_TURN_LM)
    assert scorer.whole_trajectory  # type: ignore[attr-defined]
    # The last step ends in "+" itself: still one answer per step, read where it belongs.
    texts = [*STEPS[:1], *STEPS[2:], "Done, 18 +"]
    item = TrajectoryInput(
        7, "How much?", tuple(StepInput(700 + i, t) for i, t in enumerate(texts))
    )
    got = by_key(scorer.score([item]))
    assert sorted(got) == [s.key for s in item.steps]
    assert got == pytest.approx(rlhflow_reference(scorer, item), abs=1e-5)
    assert len({round(v, 6) for v in got.values()}) == len(got)


def test_chat_turns_read_before_each_answer(tiny_models: TinyModels) -> None:
    scorer = build(tiny_models, CHAT_TURN_LM)
    tokenizer: Any = scorer.tokenizer  # type: ignore[attr-defined]
    plus = tokenizer.convert_tokens_to_ids("+")
    (sequence,) = scorer.encode([trajectory()])
    # One read per labelable step, each at the token right before an assistant "+".
    assert len(sequence.reads) == 4
    answers = [i for i in range(1, len(sequence.ids)) if sequence.ids[i] == plus]
    later = [r.position + 1 for r in sequence.reads[:-1]]
    assert set(later) <= set(answers)
    # The sequence stops where the last step's answer would be predicted.
    assert sequence.reads[-1].position == len(sequence.ids) - 1
    text = tokenizer.decode(sequence.ids)
    # The tool output (not labelable) opens the next step's user turn, never a turn alone.
    assert text.count("<|start_header_id|>user") == 4
    assert "Tool result: 13\n\nShe bakes" in text


def test_chat_format_places_markers_inside_the_template(tiny_models: TinyModels) -> None:
    scorer = build(
        tiny_models,
        TOKEN_CLASSIFICATION,
        prompt_format="chat",
        system_prompt="Reason step by step.",
        step_join="",
    )
    (sequence,) = scorer.encode([trajectory()])
    separator = scorer.tokenizer.convert_tokens_to_ids(tiny.SEPARATOR)  # type: ignore[attr-defined]
    assert [sequence.ids[r.position] for r in sequence.reads] == [separator] * 4
    text = scorer.tokenizer.decode(sequence.ids)  # type: ignore[attr-defined]
    assert text.startswith("<|im_start|>system\nReason step by step.<|im_end|>")


def test_out_of_memory_halves_the_batch_and_retries(
    tiny_models: TinyModels, monkeypatch: pytest.MonkeyPatch
) -> None:
    scorer = build(tiny_models, TOKEN_CLASSIFICATION, batch_size=16)
    expected = by_key(scorer.score(many(12)))
    forward = scorer.forward
    sizes: list[int] = []

    def tight(batch: list[Any]) -> list[Any]:
        sizes.append(len(batch))
        if len(batch) > 3:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return forward(batch)

    monkeypatch.setattr(scorer, "forward", tight)
    assert by_key(scorer.score(many(12))) == pytest.approx(expected, abs=1e-6)
    assert sizes[:3] == [12, 6, 3]
    assert scorer.batch_size == 3


def test_one_sequence_out_of_memory_is_an_error(
    tiny_models: TinyModels, monkeypatch: pytest.MonkeyPatch
) -> None:
    scorer = build(tiny_models, TOKEN_CLASSIFICATION, batch_size=4)

    def never(batch: list[Any]) -> list[Any]:
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(scorer, "forward", never)
    with pytest.raises(ScorerError, match="out of memory on one sequence"):
        scorer.score([trajectory()])


def test_a_model_is_loaded_once_per_process(tiny_models: TinyModels) -> None:
    same = spec(TOKEN_CLASSIFICATION, tiny_models.token_classifier, batch_size=3)
    before = LOADED.loads
    first = adapters.scorer_load(same)
    assert adapters.scorer_load(dataclasses.replace(same)) is first
    assert LOADED.loads == before + 1


def test_cpu_uses_fp32(tiny_models: TinyModels) -> None:
    scorer = build(tiny_models, TOKEN_CLASSIFICATION)
    assert scorer.device.type == "cpu" and scorer.dtype == torch.float32
    assert next(scorer.model.parameters()).dtype == torch.float32  # type: ignore[attr-defined]


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ScorerError, match="unknown scorer parameter 'batchsize'"):
        params_for_kind(TOKEN_CLASSIFICATION, {"batchsize": 4})
    with pytest.raises(ScorerError, match="'batch_size' must be int"):
        params_for_kind(TOKEN_CLASSIFICATION, {"batch_size": "4"})
    with pytest.raises(ScorerError, match="'dtype' must be one of"):
        params_for_kind(TOKEN_CLASSIFICATION, {"dtype": "int8"})
    assert params_for_kind(STEP_TAG_LM, {}).separator == " ки"


def test_a_tag_that_is_several_tokens_is_refused(tiny_models: TinyModels) -> None:
    with pytest.raises(ScorerError, match="not one token"):
        build(tiny_models, STEP_TAG_LM, positive_token="+++plus")


# --- The trained head ----------------------------------------------------------------------


def test_trained_head_learns_a_separable_signal(tiny_models: TinyModels) -> None:
    """Steps that say "wrong" are bad: even a random tiny encoder separates them."""
    labeled = []
    for k in range(60):
        good = k % 3 != 0
        text = f"Step {k}: " + (
            "this is right, 3 + 4 = 7" if good else "wrong wrong wrong 3 + 4 = 9"
        )
        step = StepInput(k, text, score=False)
        labeled.append(
            LabeledTrajectory(
                TrajectoryInput(1000 + k, "Add.", (step,)), f"task-{k}", {k: good}, True
            )
        )
    result = train_head(
        labeled, spec=spec(TRAINED_HEAD, tiny_models.encoder, max_length=32), holdout=0.3
    )
    assert result.metrics["heldout_steps"] > 5
    assert result.metrics["auroc"] > 0.9
    assert result.metrics["processbench_f1"] is not None
    scorer = TrainedHeadScorer(
        dataclasses.replace(
            spec(TRAINED_HEAD, tiny_models.encoder, max_length=32),
            artifact=result.head.to_dict(),
        )
    )
    scored = by_key(
        scorer.score([TrajectoryInput(1, "Add.", (StepInput(1, "wrong wrong wrong 3 + 4 = 9"),))])
    )
    assert scored[1] < 0.5


def test_holdout_is_grouped_and_stable() -> None:
    groups = [f"task-{i}" for i in range(1000)]
    held = [g for g in groups if in_holdout(g, 0.2)]
    assert 150 < len(held) < 250
    assert held == [g for g in groups if in_holdout(g, 0.2)]


def test_web_code_never_loads_torch() -> None:
    """Web processes import the scoring app (models, services, views, API, tasks) without
    torch or transformers: those load on a worker, inside the task."""
    probe = (
        "import django, json, sys; django.setup(); "
        "import scoring.services, scoring.views, scoring.api, scoring.tasks, scoring.admin; "
        "print(json.dumps([m for m in ('torch', 'transformers') if m in sys.modules]))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "stepscope.settings"},
    )
    assert completed.stdout.strip().splitlines()[-1] == "[]"
