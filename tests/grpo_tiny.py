"""A real TRL GRPO training of a tiny randomly initialised model on the CPU (a few
seconds), for the tests of the TRL completions importer and the client's callback."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

PROMPTS = ("Janet has 16 eggs.", "Compute the area.", "Let x be 5.")


def reward_length(completions: list[str], **_: Any) -> list[float | None]:
    return [len(completion) / 10 for completion in completions]


def reward_letter_e(completions: list[str], **_: Any) -> list[float | None]:
    return [float(completion.count("e")) for completion in completions]


def grpo_train(
    workdir: Path, *, steps: int = 2, callbacks: Sequence[Any] = (), generations: int = 2
) -> Path:
    """Train for ``steps`` steps with two reward functions, logging completions; returns
    the output directory (its ``completions/`` holds TRL's tables)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from scoring.prm.tiny import save_step_tag_lm

    model = save_step_tag_lm(workdir / "model", layers=1, hidden=32)
    args = GRPOConfig(
        output_dir=str(workdir / "out"),
        per_device_train_batch_size=4,
        num_generations=generations,
        max_completion_length=8,
        max_steps=steps,
        logging_steps=1,
        log_completions=True,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        bf16=False,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=str(model),
        reward_funcs=[reward_length, reward_letter_e],
        args=args,
        # Distinct prompts, so each step's two prompts are two GRPO groups.
        train_dataset=Dataset.from_dict(
            {"prompt": [f"{prompt} ({n})" for n in range(4) for prompt in PROMPTS]}
        ),
        callbacks=list(callbacks),
    )
    trainer.train()
    return workdir / "out"
