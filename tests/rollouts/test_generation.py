"""The generation path on a tiny random causal LM: prompts, batching with left padding,
samples, stop strings, truncation, the load-once cache; and parameter validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollouts.generation import (
    LENGTH,
    STOP,
    PolicyError,
    PolicySpec,
    PrefixStep,
    Request,
    policy_params,
)
from rollouts.generation.generator import Generator
from rollouts.generation.prompts import (
    cut_at_final_answer,
    cut_at_stop,
    render_prompt,
    split_steps,
)
from scoring.prm.cache import LOADED
from scoring.prm.tiny import CHAT_TEMPLATE, build_tokenizer

STEPS = (PrefixStep("Step 1: 3 + 4 = 7"), PrefixStep("Step 2: 7 * 2 = 14"))


def test_plain_prompt_ends_where_the_next_step_starts() -> None:
    params = policy_params({"task_format": "Q: {task}\n", "step_join": "\n"})
    assert (
        render_prompt(params, "Add.", STEPS) == "Q: Add.\nStep 1: 3 + 4 = 7\nStep 2: 7 * 2 = 14\n"
    )
    assert render_prompt(params, "Add.", ()) == "Q: Add.\n"
    numbered = policy_params({"step_format": "{number}. {content}", "step_join": "\n"})
    assert render_prompt(numbered, "T", STEPS[:1]) == "T\n\n1. Step 1: 3 + 4 = 7\n"


def test_chat_prompt_continues_the_assistant_turn_or_opens_one() -> None:
    tokenizer = build_tokenizer()
    assert tokenizer.chat_template == CHAT_TEMPLATE
    params = policy_params({"prompt_format": "chat", "step_join": "\n"})
    text = render_prompt(params, "Add.", STEPS, tokenizer=tokenizer)
    assert text.endswith("<|im_start|>assistant\nStep 1: 3 + 4 = 7\nStep 2: 7 * 2 = 14\n")
    assert "<|im_end|>" not in text.split("assistant\n", 1)[1]
    after_tool = (*STEPS, PrefixStep("42", role="tool"))
    opened = render_prompt(params, "Add.", after_tool, tokenizer=tokenizer)
    assert opened.endswith("<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n")
    with pytest.raises(PolicyError, match="needs a tokenizer"):
        render_prompt(params, "Add.", STEPS)


def test_generated_text_is_cut_at_stops_and_into_steps() -> None:
    params = policy_params({"step_join": "\n"})
    assert split_steps(params, "a\n\n b \nc\n") == ("a", "b", "c")
    assert cut_at_stop("x = 1 END y", ("END", "y")) == ("x = 1 ", True)
    assert cut_at_stop("x", ("END",)) == ("x", False)


def test_a_continuation_ends_with_the_line_of_its_first_final_answer() -> None:
    text = "3 + 1 = 4.\nThe answer is 4.\nStep: 5 + 5 = 10.\nThe answer is 10."
    assert cut_at_final_answer(text) == ("3 + 1 = 4.\nThe answer is 4.", True)
    assert cut_at_final_answer("So \\boxed{4} it is.\nMore.") == ("So \\boxed{4} it is.", True)
    assert cut_at_final_answer("#### 72") == ("#### 72", True)
    # A marker with nothing after it on its line is no answer yet.
    assert cut_at_final_answer("The answer:\nlet me think") == ("The answer:\nlet me think", False)
    assert cut_at_final_answer("4 + 4 = 8.") == ("4 + 4 = 8.", False)


def test_parameters_are_checked_by_name_and_type() -> None:
    assert policy_params({"stop": "END"}).stop == ("END",)
    assert policy_params({"temperature": 1}).temperature == 1.0
    for raw, message in (
        ({"tempreature": 1.0}, "unknown policy parameter"),
        ({"max_new_tokens": "9"}, "must be int"),
        ({"batch_size": True}, "must be int"),
        ({"temperature": -1.0}, "cannot be negative"),
        ({"prompt_format": "xml"}, "must be one of"),
        ({"max_new_tokens": 5000}, "below 'max_length'"),
        ({"task_format": "{question}"}, "not a valid format"),
        ({"stop": [""]}, "non-empty strings"),
        ({"cpu_threads": -1}, "cannot be negative"),
    ):
        with pytest.raises(PolicyError, match=message):
            policy_params(raw)


def make_generator(path: Path, **parameters: object) -> Generator:
    raw = {"max_new_tokens": 6, "temperature": 0.0, "device": "cpu", **parameters}
    return Generator(PolicySpec(model_ref=str(path), params=policy_params(raw)))


def test_k_samples_per_request_in_request_order(tiny_policy_dir: Path) -> None:
    generator = make_generator(tiny_policy_dir, temperature=1.0, batch_size=4)
    requests = [
        Request(key=7, task="Add 3 and 4.", steps=STEPS, samples=3, first_sample=5, seed=1),
        Request(key=9, task="Short.", steps=(), samples=2, seed=2),
    ]
    results = generator.generate(requests)
    assert [(r.key, r.sample) for r in results] == [(7, 5), (7, 6), (7, 7), (9, 0), (9, 1)]
    assert all(0 < r.new_tokens <= 6 for r in results)
    assert all(r.finish_reason in ("eos", LENGTH) for r in results)
    # Seeded per batch: the same requests sample the same text again.
    again = generator.generate(requests)
    assert [r.text for r in again] == [r.text for r in results]


def test_left_padding_does_not_change_what_a_prompt_generates(tiny_policy_dir: Path) -> None:
    generator = make_generator(tiny_policy_dir)
    short = Request(key=1, task="Short.", steps=(), samples=1)
    long = Request(key=2, task="A much longer task " * 6, steps=STEPS, samples=1)
    alone = generator.generate([short])[0]
    batched = generator.generate([long, short])
    assert batched[1].text == alone.text
    assert batched[1].prompt_tokens == alone.prompt_tokens < batched[0].prompt_tokens


def test_a_long_prompt_loses_tokens_from_the_left_and_says_so(tiny_policy_dir: Path) -> None:
    generator = make_generator(tiny_policy_dir, max_length=40)
    result = generator.generate([Request(key=1, task="word " * 100, steps=(), samples=1)])[0]
    assert result.dropped_tokens > 0
    assert result.prompt_tokens == 40 - 6


def test_stop_strings_end_generation(tiny_policy_dir: Path) -> None:
    generator = make_generator(tiny_policy_dir, max_new_tokens=12)
    free = generator.generate([Request(key=1, task="Go.", steps=(), samples=1)])[0]
    assert free.text, "the tiny model generated nothing to stop on"
    stop = free.text.strip()[:2]
    stopped = make_generator(tiny_policy_dir, max_new_tokens=12, stop=[stop])
    result = stopped.generate([Request(key=1, task="Go.", steps=(), samples=1)])[0]
    assert result.finish_reason == STOP
    assert stop not in result.text


def test_a_policy_is_loaded_once_per_process(tiny_policy_dir: Path) -> None:
    from rollouts.generation import generator

    spec = PolicySpec(model_ref=str(tiny_policy_dir), params=policy_params({"device": "cpu"}))
    before = LOADED.loads
    first = generator.generator_load(spec)
    assert generator.generator_load(spec) is first
    assert LOADED.loads == before + 1
    with pytest.raises(PolicyError, match="vllm is not installed"):
        generator.generator_build(
            PolicySpec(model_ref=str(tiny_policy_dir), params=policy_params({"backend": "vllm"}))
        )


def test_cpu_threads_hold_while_generating_and_are_given_back(tiny_policy_dir: Path) -> None:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        generator = make_generator(tiny_policy_dir, cpu_threads=1)
        with generator.threads():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with make_generator(tiny_policy_dir).threads():
            assert torch.get_num_threads() == 2  # 0: torch's own setting
        request = Request(key=1, task="1 + 1", steps=(), samples=2)
        assert len(generator.generate([request])) == 2
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
