"""A TRL ``TrainerCallback`` that pushes the completions of each logging step to
Stepscope while a GRPO training runs:

    from stepscope_client import Client
    from stepscope_client.trl import StepscopeCallback

    callback = StepscopeCallback(Client("http://127.0.0.1:8000", token), "my-run")
    trainer = GRPOTrainer(..., args=GRPOConfig(..., log_completions=True), callbacks=[callback])

It reads what the trainer itself writes when ``log_completions`` is on: the completions
table of each logging step (``<output_dir>/completions/completions_<step>.parquet``:
``step, prompt, completion, <one column per reward function>, <extra>, advantage``).
The trainer writes a step's table right after telling its callbacks about the step's
logs, so the callback pushes each table at the end of the next step, and the rest when
training ends. Each completion becomes a trajectory (the prompt, then the completion with
its training step and advantage; its rewards per function in the metadata, their sum the
outcome), keyed by prompt so one prompt's generations are one task group, the shape
``import_trajectories --format trl-completions`` gives the same tables (with ids of the
run's own). A table pushed again changes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from stepscope_client.client import Client
from stepscope_client.trainers import rollout_batch_push

# The table's columns that are not a reward function's.
TABLE_COLUMNS = ("step", "prompt", "completion", "advantage")


class StepscopeCallback(TrainerCallback):
    """Pushes each logging step's completions (with rewards and advantages) into
    ``project``; ``run`` prefixes the trajectories' ids (default: the output folder's
    name) so runs pushing into one project stay apart."""

    def __init__(self, client: Client, project: str, *, run: str | None = None) -> None:
        self.client = client
        self.project = project
        self.run = run
        self.pushed: dict[str, int] = {}  # table file name -> completions pushed

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not getattr(args, "log_completions", False):
            raise ValueError(
                "StepscopeCallback reads the completions TRL logs: set log_completions=True"
            )
        if self.run is None:
            self.run = Path(args.output_dir).name

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._push_new(args)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._push_new(args)

    def _push_new(self, args: Any) -> None:
        folder = Path(args.output_dir) / "completions"
        if not folder.is_dir():
            return
        for table in sorted(folder.glob("completions_*.parquet")):
            if table.name in self.pushed:
                continue
            self.pushed[table.name] = self._push_table(table)

    def _push_table(self, table: Path) -> int:
        import pyarrow.parquet as pq

        columns = pq.read_table(table).to_pydict()
        if not columns.get("prompt"):
            return 0
        steps = set(columns["step"])
        if len(steps) != 1:
            raise ValueError(f"{table}: one table, one step expected; it has {sorted(steps)}")
        step = int(steps.pop())
        batch: dict[str, Any] = {
            "prompt": columns["prompt"],
            "completion": columns["completion"],
            "advantage": columns["advantage"],
        }
        for name, values in columns.items():
            numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
            if name not in TABLE_COLUMNS and numeric:
                batch[f"reward/{name}"] = values
        rollout_batch_push(
            self.client, self.project, batch, step=step, run=self.run or "", key_prefix="trl"
        )
        return len(columns["prompt"])
