"""The walk of one export: which of Stepscope's modules an export enters on its way, and
how often it resolves the same things again (issue 35, "Resolve an export once").

    .venv/bin/python bench/export_walk.py

A small project (arithmetic rollouts with truth labels, a scorer's scores, an
attribution run's credits, an LLM judge's critiques, a model's decisive failures) is
made, and for each case below an export is built (``export_plan_build``) and
written (``export_write``) under ``sys.setprofile`` (``threading.setprofile`` too, for
the reading thread). Counted on the write only (the build's own figures are printed
beside it):

- modules: Stepscope's modules (the repository's, not tests or bench) entered from
  another of them: a call whose caller's module differs from the callee's;
- entries / returns: such calls, and returns from one module into another (a
  generator's frame counts once: its resumptions and yields are not counted);
- the named resolvers below: how many times each ran.

The Django-free writers' own calls among themselves are left out (they are the
per-record work, which grows with the data); a call into them from elsewhere counts.
The project is dropped at the end, also when a step fails.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402

from bench.cleanup import project_drop  # noqa: E402
from bench.export import credited  # noqa: E402
from exports.services import export_plan_build, export_write  # noqa: E402
from trajectories import synthetic  # noqa: E402
from trajectories.models import Project, Step, Trajectory  # noqa: E402
from trajectories.services import project_create, trajectory_import  # noqa: E402

# The functions whose calls are counted by name: what an export resolves.
RESOLVERS = (
    "scorer_id_for",
    "label_source_sql",
    "label_source_parse",
    "parse_split_spec",
    "export_format",
    "credit_run_for",
    "export_plan_resolve",
    "decisive_source_parse",
    "request_filters",
    "selection_parse",
    "trajectories_filtered",
)
WRITERS = "exports.writers"
GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
CASES: dict[str, dict[str, Any]] = {
    "rl parquet (bulk), credits, split, scores": dict(
        format="rl",
        labels="import:synthetic-truth",
        neutral="keep",
        scorer="prm",
        split="train=0.8,test=0.2",
        options={"step_reward": "score"},
    ),
    "trl-stepwise jsonl, critiques, decisive, scores": dict(
        format="trl-stepwise",
        labels="import:synthetic-truth",
        neutral="positive",
        scorer="prm",
        options={"critiques": "judge", "decisive": "model:judge"},
    ),
    "dpo by credit": dict(
        format="dpo",
        labels="import:synthetic-truth",
        neutral="keep",
        options={"pair_value": "credit", "min_margin": 0.1},
    ),
}


def _module(frame: FrameType) -> str | None:
    """The Stepscope module of ``frame``'s code, or None for anything else."""
    path = frame.f_code.co_filename
    if not path.startswith(str(REPO)) or "/tests/" in path or "/bench/" in path:
        return None
    if "/.venv/" in path:
        return None
    relative = Path(path).relative_to(REPO).with_suffix("")
    return ".".join(relative.parts).removesuffix(".__init__")


class Walk:
    def __init__(self) -> None:
        self.entries: Counter[str] = Counter()
        self.returns = 0
        self.resolvers: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.generators: set[FrameType] = set()

    def profile(self, frame: FrameType, event: str, _: Any) -> None:
        if event not in ("call", "return"):
            return
        here = _module(frame)
        if here is None:
            return
        caller = frame.f_back
        there = _module(caller) if caller is not None else None
        if there is None or there == here:
            return
        if here.startswith(WRITERS) and there.startswith(WRITERS):
            return
        generator = bool(frame.f_code.co_flags & GENERATOR_FLAGS)
        with self.lock:
            if event == "call":
                if generator:
                    # A generator's frame is "called" again at every resumption: the
                    # first call is its entry.
                    if frame in self.generators:
                        return
                    self.generators.add(frame)
                self.entries[here] += 1
                if frame.f_code.co_name in RESOLVERS:
                    self.resolvers[frame.f_code.co_name] += 1
            elif not generator:  # a generator "returns" at every yield
                self.returns += 1

    def __enter__(self) -> Walk:
        threading.setprofile(self.profile)
        sys.setprofile(self.profile)
        return self

    def __exit__(self, *_: object) -> None:
        sys.setprofile(None)
        threading.setprofile(None)

    def figures(self) -> dict[str, Any]:
        return {
            "modules": len(self.entries),
            "entries": sum(self.entries.values()),
            "returns": self.returns,
            "resolvers": dict(sorted(self.resolvers.items())),
            "by_module": dict(sorted(self.entries.items())),
        }


def setup(project: Project) -> int:
    """The rollouts, scores, credits, critiques and decisive failures; the credit run's id."""
    from labeling.models import LabelSchema  # noqa: F401  (the app's models are loaded)
    from scoring import prm
    from scoring.models import JudgePrompt, JudgeReply, Scorer, ScoringRun, StepScore
    from scoring.services import VerdictInput, failure_verdicts_write

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rollouts.jsonl"
        synthetic.write_jsonl(
            path, synthetic.rollouts(tasks=4, rollouts_per_task=3, steps_per_task=4, seed=1)
        )
        trajectory_import(project=project, source_format="stepscope", path=path)
    run = credited(project)
    steps = list(Step.objects.filter(trajectory__project=project).order_by("id"))
    external = Scorer.objects.create(project=project, name="prm", kind=prm.EXTERNAL)
    StepScore.objects.bulk_create(
        StepScore(step=step, scorer=external, value=(step.pk % 7) / 7) for step in steps
    )
    judge = Scorer.objects.create(project=project, name="judge", kind=prm.LLM_JUDGE)
    prompt = JudgePrompt.objects.create(scorer=judge, version=1, template="{task} {step}")
    judged = ScoringRun.objects.create(project=project, scorer=judge, prompt=prompt, status="done")
    JudgeReply.objects.bulk_create(
        JudgeReply(
            run=judged,
            scorer=judge,
            prompt=prompt,
            key=f"s{step.pk}",
            trajectory_id=step.trajectory_id,
            step=step,
            text="Fine.\n\\boxed{1}",
            critique="Fine.",
            verdict=1,
            value=1.0,
        )
        for step in steps
        if step.labelable
    )
    failure_verdicts_write(
        scorer=judge,
        verdicts=[
            VerdictInput(pk, "", 1, reason="here")
            for pk in Trajectory.objects.filter(project=project).values_list("pk", flat=True)
        ],
    )
    return run.pk


def main() -> None:
    print(f"$ {' '.join([Path(sys.executable).name, *sys.argv])}")
    project = project_create(slug=f"bench-walk-{os.getpid()}", name="bench walk")
    User.objects.get_or_create(username="bench-walk")
    figures: dict[str, Any] = {}
    try:
        run_id = setup(project)
        for name, case in CASES.items():
            parameters = dict(case)
            if case["format"] in ("rl", "dpo"):
                parameters["credit_run"] = run_id
            with Walk() as built:
                plan = export_plan_build(project=project, **parameters)
            with tempfile.TemporaryDirectory() as tmp, Walk() as written:
                start = time.perf_counter()
                export_write(plan, out_dir=Path(tmp))
                seconds = time.perf_counter() - start
            figures[name] = {"build": built.figures(), "write": written.figures()}
            write = written.figures()
            print(
                f"{name}: export_write enters {write['modules']} modules {write['entries']} times"
                f" with {write['returns']} returns ({seconds:.2f} s under the profiler);"
                f" export_plan_build {built.figures()['entries']} entries"
            )
            print(f"  resolvers in export_write: {write['resolvers']}")
            print(f"  resolvers in export_plan_build: {built.figures()['resolvers']}")
            print(f"  modules: {write['by_module']}")
    finally:
        project_drop(project)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
