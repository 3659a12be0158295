"""The demo policy's training script, run for a few steps: it writes a model the real
generation path loads, and the command registers it as a policy."""

from __future__ import annotations

import json
import random
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from rollouts import demo_policy
from rollouts.models import Policy


def test_drills_and_loss_weights_aim_at_the_results() -> None:
    text = demo_policy.drill_text(random.Random(0), lines=3)
    lines = text.split("\n")
    assert len(lines) == 3 and all(
        line.startswith(f"Step {n}: ") for n, line in enumerate(lines, 1)
    )
    first, second = lines[0].split(" = "), lines[1].split(": ")[1]
    assert second.startswith(first[1] + " ")  # each step starts from the last result
    prompt, solution = demo_policy.solution_text(
        {
            "task": "T?",
            "steps": [{"content": "Step 1: 12 + 3 = 15"}, {"content": "The answer is 15."}],
        }
    )
    assert (prompt, solution) == ("T?\n", "Step 1: 12 + 3 = 15\nThe answer is 15.")
    tokenizer = demo_policy.build_tokenizer([prompt + solution] * 10)
    ids, weights = demo_policy._weighted(
        tokenizer, prompt + solution, loss_from=len(prompt), other=1.0, result=3.0
    )
    tokens = tokenizer.convert_ids_to_tokens(ids)
    weighted = {t.lstrip("Ġ"): w for t, w in zip(tokens, weights, strict=True)}
    assert weighted["T"] == 0.0  # the task carries no loss
    # "= 15": the result's digits weigh 3; "Step 1", "12 + 3" and "answer is 15" weigh 1.
    digits = [(t, w) for t, w in zip(tokens, weights, strict=True) if t.isdigit()]
    assert digits == [
        ("1", 1.0),
        ("1", 1.0),
        ("2", 1.0),
        ("3", 1.0),
        ("1", 3.0),
        ("5", 3.0),
        ("1", 1.0),
        ("5", 1.0),
    ]
    assert "1" in tokens and "12" not in tokens  # digits stay single tokens


def test_train_saves_a_model_the_generation_path_loads(tmp_path: Path) -> None:
    report = demo_policy.train(
        tmp_path / "policy", minutes=5, max_steps=2, batch_size=4, layers=1, hidden=32
    )
    assert report.steps == 2 and report.parameters > 0
    saved = json.loads((tmp_path / "policy" / "stepscope-demo-policy.json").read_text())
    assert saved["steps"] == 2
    evaluated = demo_policy.evaluate(tmp_path / "policy", tasks=2)
    assert evaluated["samples"] == 2 and 0.0 <= evaluated["solve_rate"] <= 1.0


@pytest.mark.django_db
def test_command_trains_once_and_registers_the_policy(
    tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.MODELS_DIR = tmp_path / "models"
    calls = []
    real_train = demo_policy.train

    def quick(out_dir: Path, **options: object) -> demo_policy.TrainingReport:
        calls.append(options)
        return real_train(out_dir, max_steps=1, batch_size=2, layers=1, hidden=32)

    monkeypatch.setattr(demo_policy, "train", quick)
    for _ in range(2):
        out = StringIO()
        call_command("train_demo_policy", minutes=1, stdout=out)
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    assert len(calls) == 1 and summary["trained"] is False
    policy = Policy.objects.get(name="demo-policy", project=None)
    assert Path(policy.model_ref) == tmp_path / "models" / f"demo-policy-v{demo_policy.VERSION}"
    assert policy.parameters == demo_policy.PARAMETERS and summary["policy"] == policy.pk


def test_the_batch_in_two_parts_has_the_loss_of_the_batch_padded_as_one() -> None:
    """Training pads problems and drills each to their own longest sequence: the loss
    (so the gradient) is the one of the whole batch padded to its longest."""
    import torch
    import torch.nn.functional as functional

    prompt, solution = demo_policy.solution_text(
        {"task": "T?", "steps": [{"content": "Step 1: 12 + 3 = 15"}]}
    )
    drill = demo_policy.drill_text(random.Random(1), lines=6)
    tokenizer = demo_policy.build_tokenizer([prompt + solution, drill] * 10)
    model = demo_policy.build_model(tokenizer, layers=1, hidden=32)
    pad = tokenizer.pad_token_id
    problems = [
        demo_policy._weighted(
            tokenizer, prompt + solution, loss_from=len(prompt), other=1.0, result=2.0
        )
    ] * 3
    drills = [demo_policy._weighted(tokenizer, drill, loss_from=0, other=0.0, result=2.0)]
    assert len(drills[0][0]) > len(problems[0][0])  # the drill is the longer
    total = sum(sum(weight[1:]) for _, weight in problems + drills)
    with torch.no_grad():
        parts = sum(
            demo_policy._part_loss(model, part, pad, functional) for part in (problems, drills)
        )
        whole = demo_policy._part_loss(model, problems + drills, pad, functional)
    assert float(parts / total) == pytest.approx(float(whole / total), rel=1e-5)
