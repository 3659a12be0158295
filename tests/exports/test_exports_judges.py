"""Exports of what judges and failure attribution give, end to end on PostgreSQL: an LLM
judge's critiques beside trl-stepwise's labels and as the critique format's SFT rows
(issue 23), and decisive failures through the Stepscope JSONL and the trajectory-level
records, from the real Who&When logs and from a model (issue 22)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from labeling.models import TrajectoryLabel
from scoring import prm
from scoring.models import JudgePrompt, JudgeReply, Scorer, ScoringRun
from scoring.services import VerdictInput, failure_verdicts_write
from tests.exports.test_exports import export
from tests.factories import MembershipFactory, UserFactory
from tests.labeling.test_decisive import who_and_when
from tests.trajectories.test_formats_mapped import WHO_AND_WHEN_COUNTS
from trajectories.models import Membership, Project, Step, Trajectory
from trajectories.services import project_create, trajectory_import

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert("critique")</script> & <b>bold</b>'
TASK = "What is 2 + 3 * 4?"


def run_record(external_id: str, second: str, second_label: int) -> dict[str, Any]:
    return {
        "id": external_id,
        "task": TASK,
        "task_key": "arith",
        "steps": [
            {"role": "user", "content": TASK},
            {"kind": "thought", "content": "3 * 4 = 12.", "labels": [{"value": 1}]},
            {"kind": "thought", "content": second, "labels": [{"value": second_label}]},
            {"kind": "answer", "content": "Done."},
        ],
    }


@pytest.fixture
def arith(tmp_path: Path) -> Project:
    """Two rollouts, labelled by their import (``import:stepscope``): the second step is
    right in ``good`` and wrong in ``bad``; nobody labelled the answers."""
    project = project_create(slug="arith", name="arith")
    path = tmp_path / "runs.jsonl"
    records = [run_record("good", "2 + 12 = 14.", 1), run_record("bad", "12 + 2 = 15.", -1)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    trajectory_import(project=project, source_format="stepscope", path=path)
    return project


def step_of(project: Project, external_id: str, index: int) -> Step:
    return Step.objects.get(
        trajectory__project=project, trajectory__external_id=external_id, index=index
    )


def judge_run(project: Project, scorer: Scorer, prompt: JudgePrompt) -> ScoringRun:
    return ScoringRun.objects.create(project=project, scorer=scorer, prompt=prompt, status="done")


def reply(run: ScoringRun, step: Step, critique: str, verdict: int | None, **fields: Any) -> None:
    assert run.scorer is not None and run.prompt is not None
    sign = {1: "+1", 0: "0", -1: "-1", None: "?"}[verdict]
    JudgeReply.objects.create(
        run=run,
        scorer=run.scorer,
        prompt=run.prompt,
        key=f"s{step.pk}",
        trajectory=step.trajectory,
        step=step,
        text=fields.pop("text", f"{critique}\n\\boxed{{{sign}}}"),
        critique=critique,
        verdict=verdict,
        value=None if verdict is None else {1: 1.0, 0: 0.5, -1: 0.0}[verdict],
        **fields,
    )


@pytest.fixture
def judge(arith: Project) -> Scorer:
    """A per-step judge with two runs: the newer reply on a step wins, a reply it could
    not parse and a whole-trajectory reply give no critique."""
    scorer = Scorer.objects.create(
        project=arith, name="judge", kind=prm.LLM_JUDGE, model_ref="tiny"
    )
    prompt = JudgePrompt.objects.create(scorer=scorer, version=1, template="{task} {step}")
    old, new = judge_run(arith, scorer, prompt), judge_run(arith, scorer, prompt)
    reply(old, step_of(arith, "good", 1), "An old view.", -1)
    reply(new, step_of(arith, "good", 1), "3 * 4 is 12.", 1)
    reply(new, step_of(arith, "good", 2), "Right.", 1)
    reply(new, step_of(arith, "bad", 1), "Fine.", 1)
    reply(new, step_of(arith, "bad", 2), HOSTILE, -1)
    reply(new, step_of(arith, "bad", 3), "", None, text="no verdict", parse_error="no match")
    bad = Trajectory.objects.get(project=arith, external_id="bad")
    JudgeReply.objects.create(
        run=new,
        scorer=scorer,
        prompt=prompt,
        key=f"t{bad.pk}",
        trajectory=bad,
        text="\\boxed{2}",
        critique="Step 2 is wrong.",
        verdict=2,
    )
    return scorer


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


BASE = ["--project", "arith", "--labels", "import:stepscope", "--neutral", "drop"]


def test_trl_stepwise_carries_the_newest_critique_beside_each_label(
    tmp_path: Path, judge: Scorer
) -> None:
    out = tmp_path / "trl"
    export(*BASE, "--format", "trl-stepwise", "--critiques", "judge", "--out", str(out))
    by_prompt = {tuple(r["completions"]): r for r in lines(out / "trl-stepwise.jsonl")}
    good = by_prompt[("3 * 4 = 12.", "2 + 12 = 14.")]
    bad = by_prompt[("3 * 4 = 12.", "12 + 2 = 15.")]
    assert good["labels"] == [True, True] and good["critiques"] == ["3 * 4 is 12.", "Right."]
    # The judge's text, as it wrote it: nothing escaped in a file.
    assert bad["labels"] == [True, False] and bad["critiques"] == ["Fine.", HOSTILE]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["options"]["critiques"] == "judge"
    # Without the option, the bulk path writes the same records without critiques.
    plain = tmp_path / "plain"
    export(*BASE, "--format", "trl-stepwise", "--out", str(plain))
    assert [
        {k: v for k, v in r.items() if k != "critiques"} for r in lines(out / "trl-stepwise.jsonl")
    ] == lines(plain / "trl-stepwise.jsonl")


def test_critique_rows_pair_the_prefix_with_the_judges_reply(tmp_path: Path, judge: Scorer) -> None:
    out = tmp_path / "critique"
    export(*BASE, "--format", "critique", "--critiques", "judge", "--out", str(out))
    rows = {(r["id"], r["step_index"]): r for r in lines(out / "critique.jsonl")}
    assert sorted(rows) == [("bad", 1), ("bad", 2), ("good", 1), ("good", 2)]
    wrong = rows["bad", 2]
    assert wrong == {
        "id": "bad",
        "step_index": 2,
        "prompt": f"{TASK}\n\n3 * 4 = 12.\n\n12 + 2 = 15.\n\n",
        "completion": f"{HOSTILE}\n\\boxed{{-1}}",
        "verdict": -1,
        "label": -1,
        "agrees": True,
    }
    assert rows["good", 1]["completion"] == "3 * 4 is 12.\n\\boxed{+1}"
    manifest = json.loads((out / "manifest.json").read_text())
    # The answers: one unanswered, one a parse failure.
    assert manifest["counts"]["notes"]["critique_steps_without_reply"] == 2


def test_agreeing_rows_leave_out_a_verdict_people_disagree_with(
    arith: Project, tmp_path: Path, judge: Scorer
) -> None:
    JudgeReply.objects.filter(step=step_of(arith, "good", 2)).update(
        verdict=-1, text="Wrong.\n\\boxed{-1}"
    )
    out = tmp_path / "agreeing"
    export(
        *BASE,
        "--format",
        "critique",
        "--critiques",
        "judge",
        "--critique-rows",
        "agreeing",
        "--out",
        str(out),
    )
    kept = [(r["id"], r["step_index"]) for r in lines(out / "critique.jsonl")]
    # good 2 is right by its label and wrong by the judge; the other three agree.
    assert sorted(kept) == [("bad", 1), ("bad", 2), ("good", 1)]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--format", "critique"], "critique rows are a judge's critiques; name the judge"),
        (["--format", "trl-stepwise", "--critiques", "nobody"], "no scorer named 'nobody'"),
        (["--format", "trl-stepwise", "--critiques", "prm"], "scorer 'prm' is a external"),
        (["--format", "dpo", "--critiques", "judge"], "dpo has no place for them"),
        (["--format", "kto", "--decisive", "model:judge"], "kto has no record per trajectory"),
        (["--format", "trl-stepwise", "--decisive", "human:majority"], "unknown decisive"),
        (["--format", "trl-stepwise", "--decisive", "human:nobody"], "no annotator 'nobody'"),
        (["--format", "trl-stepwise", "--decisive", "model:ghost"], "no scorer named 'ghost'"),
    ],
)
def test_bad_judge_and_decisive_choices_are_refused_before_anything_is_written(
    arith: Project, tmp_path: Path, judge: Scorer, extra: list[str], message: str
) -> None:
    Scorer.objects.create(project=arith, name="prm", kind=prm.EXTERNAL)
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        export(*BASE, *extra, "--out", str(tmp_path / "never"))
    assert not (tmp_path / "never").exists()


# --- decisive failures -------------------------------------------------------------------


@pytest.fixture
def logs(project: Project) -> dict[str, Trajectory]:
    return {name: who_and_when(project, name) for name in WHO_AND_WHEN_COUNTS}


def decisive_of(project: Project, annotator: str) -> dict[str, tuple[str, int | None, str]]:
    return {
        label.trajectory.external_id: (
            label.decisive_agent,
            label.decisive_step,
            label.decisive_reason,
        )
        for label in TrajectoryLabel.objects.filter(
            trajectory__project=project, annotator__username=annotator
        ).select_related("trajectory")
    }


def test_who_and_when_decisive_failures_round_trip_through_stepscope_jsonl(
    project: Project, logs: dict[str, Trajectory], tmp_path: Path
) -> None:
    imported = decisive_of(project, "import:mapped")
    assert len(imported) == len(WHO_AND_WHEN_COUNTS)
    args = ["--project", project.slug, "--format", "stepscope", "--labels", "import:mapped"]
    export(*args, "--neutral", "keep", "--out", str(tmp_path / "out"))
    written = {r["id"]: r["decisive"] for r in lines(tmp_path / "out" / "stepscope.jsonl")}
    assert written == {
        key: {"agent": agent, "step": step, "reason": reason}
        for key, (agent, step, reason) in imported.items()
    }

    copy = project_create(slug="copy", name="copy")
    trajectory_import(
        project=copy, source_format="stepscope", path=tmp_path / "out" / "stepscope.jsonl"
    )
    assert decisive_of(copy, "import:stepscope") == imported
    # And back out of the copy: the same lines.
    export(
        "--project",
        "copy",
        "--format",
        "stepscope",
        "--labels",
        "import:stepscope",
        "--neutral",
        "keep",
        "--out",
        str(tmp_path / "again"),
    )
    assert lines(tmp_path / "again" / "stepscope.jsonl") == lines(
        tmp_path / "out" / "stepscope.jsonl"
    )


def test_a_models_failure_attributions_go_in_the_records(
    project: Project, logs: dict[str, Trajectory], tmp_path: Path
) -> None:
    scorer = Scorer.objects.create(project=project, name="judge", kind=prm.LLM_JUDGE)
    first = logs["Hand-Crafted/1.json"]
    failure_verdicts_write(
        scorer=scorer, verdicts=[VerdictInput(first.pk, "WebSurfer", 13, reason=HOSTILE)]
    )
    args = ["--project", project.slug, "--labels", "import:mapped", "--neutral", "keep"]
    export(
        *args, "--format", "stepscope", "--decisive", "model:judge", "--out", str(tmp_path / "s")
    )
    written = {r["id"]: r["decisive"] for r in lines(tmp_path / "s" / "stepscope.jsonl")}
    assert written.pop(first.external_id) == {"agent": "WebSurfer", "step": 13, "reason": HOSTILE}
    assert set(written.values()) == {None}

    export(
        *args[:-2],
        "--neutral",
        "positive",
        "--format",
        "trl-stepwise",
        "--decisive",
        "model:judge",
        "--stop-at-first-error",
        "--out",
        str(tmp_path / "t"),
    )
    records = lines(tmp_path / "t" / "trl-stepwise.jsonl")
    named = [r["decisive"] for r in records if r["decisive"] is not None]
    assert [(d["agent"], d["step"], d["reason"]) for d in named] == [("WebSurfer", 13, HOSTILE)]
    assert len(records) > 1 and all("decisive" in r for r in records)


# --- the page and the API ----------------------------------------------------------------


@pytest.fixture
def researcher(arith: Project) -> User:
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=arith, role=Membership.Role.RESEARCHER)
    return user


def test_page_offers_the_judge_and_its_preview_escapes_the_critiques(
    client: Client, researcher: User, judge: Scorer
) -> None:
    client.force_login(researcher)
    page = client.get(reverse("export-list", args=["arith"])).content.decode()
    assert '<option value="judge">judge · 4 steps judged</option>' in page
    assert 'name="decisive"' in page and 'name="critique_rows"' in page
    preview = client.get(
        reverse("export-preview", args=["arith"]),
        {
            "format": "trl-stepwise",
            "labels": "import:stepscope",
            "neutral": "drop",
            "critiques": "judge",
            "critique_rows": "all",
        },
    ).content.decode()
    assert "&quot;critiques&quot;" in preview
    assert "<script>alert" not in preview and "<b>bold" not in preview
    assert "&lt;script&gt;alert(" in preview and "&lt;b&gt;bold&lt;/b&gt;" in preview


def test_api_takes_the_options_and_names_a_bad_one(researcher: User, judge: Scorer) -> None:
    api = APIClient()
    api.force_authenticate(researcher)
    body = {"project": "arith", "format": "critique", "labels": "import:stepscope"}
    refused = api.post(
        "/api/v1/exports/",
        {**body, "neutral": "drop", "options": {"critiques": "judge", "critique_rows": "most"}},
        format="json",
    )
    assert refused.status_code == 400
    assert "critique_rows is 'most'" in refused.json()["detail"]
    missing = api.post("/api/v1/exports/", {**body, "neutral": "drop"}, format="json")
    assert missing.status_code == 400
    assert "name the judge" in missing.json()["detail"]
