"""The judge alignment page and API: each prompt version of an LLM judge against a human
label source, on a small fixture worked out by hand; the trajectories of a version's
few-shot examples left out of its figures; "use as examples" making a new version; bad
input refused with a 4xx naming the field, nothing written."""

from __future__ import annotations

import math
from html import unescape
from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from evaluation.alignment import alignment_query_build, alignment_run, disagreements
from evaluation.alignment_metrics import version_figures
from evaluation.compare_metrics import Scale, StepRows, model_human_metrics
from labeling.models import LabelSchema, StepLabel, TrajectoryLabel
from labeling.sources import LabelSource
from scoring import prm
from scoring.models import FailureVerdict, JudgePrompt, JudgeReply, Scorer, ScoringRun
from scoring.services import judge_create
from scoring.services.judge_examples import END, ExampleError, judge_examples_add
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.scoring.test_views_api import api
from trajectories.models import Membership, Project, Step, Trajectory
from trajectories.services import project_create

pytestmark = pytest.mark.django_db

VALUE = {1: 1.0, 0: 0.5, -1: 0.0}
CRITIQUE = "<script>alert('critique')</script> the sum is off"


def steps_of(trajectory: Trajectory) -> list[Step]:
    return list(trajectory.steps.order_by("index"))


def answer(run: ScoringRun, step: Step, verdict: int | None, *, critique: str = "") -> None:
    assert run.prompt is not None and run.scorer is not None
    JudgeReply.objects.create(
        run=run,
        scorer=run.scorer,
        prompt=run.prompt,
        key=f"s{step.pk}",
        trajectory_id=step.trajectory_id,
        step=step,
        text=f"{critique} \\boxed{{{verdict}}}" if verdict is not None else "no verdict",
        critique=critique,
        verdict=verdict,
        value=VALUE[verdict] if verdict is not None else None,
        parse_error="" if verdict is not None else "no \\boxed{} verdict in the reply",
        prompt_tokens=10,
        completion_tokens=5,
        latency_ms=20.0,
    )


def judge_run(judge: Scorer, prompt: JudgePrompt, answers: dict[Step, int | None]) -> ScoringRun:
    assert judge.project is not None
    run = ScoringRun.objects.create(
        project=judge.project, scorer=judge, prompt=prompt, status=ScoringRun.Status.DONE
    )
    for step, verdict in answers.items():
        answer(run, step, verdict, critique=CRITIQUE if verdict == -1 else "looks right")
    return run


@pytest.fixture
def world(project: Project) -> dict[str, Any]:
    """Human labels (one annotator, so the majority is theirs), judge version 1:

        A labels [+1, +1, -1]   v1 [+1, -1, -1]
        B labels [+1, -1]       v1 [+1, -1]
        C labels [+1, +1]       v1 [+1, +1]   (and a second run whose reply on C0
                                               failed to parse)

    Confusion (rows human bad/neutral/good, columns judge): bad [2, 0, 0], good
    [1, 0, 4]: 7 steps, observed agreement 6/7, chance (2*3 + 5*4)/49 = 26/49, so
    kappa = (42 - 26) / (49 - 26) = 16/23. Bad steps: tp 2, fp 1, fn 0, F1 0.8. First
    errors: A (human 2, judge 1) missed, B (1, 1) found, C (none, none) right: accuracy
    1/2 on erroneous, 1 on correct, F1 2/3. The one disagreement is A's step 1."""
    schema = LabelSchema.objects.get(project=project, is_active=True)
    ann = UserFactory.create(username="ann")
    MembershipFactory.create(user=ann, project=project, role=Membership.Role.RESEARCHER)
    a = trajectory_with_steps(project, ["a0", "a1 uses {x} and {{y}}", "a2"], external_id="A")
    b = trajectory_with_steps(project, ["b0", "b1"], external_id="B")
    c = trajectory_with_steps(project, ["c0", "c1"], external_id="C")
    labels = {a: [1, 1, -1], b: [1, -1], c: [1, 1]}
    for trajectory, values in labels.items():
        for step, value in zip(steps_of(trajectory), values, strict=True):
            rationale = "<b>a1 is fine</b>: x is defined" if step.content.startswith("a1") else ""
            StepLabel.objects.create(
                step=step, annotator=ann, schema=schema, value=value, rationale=rationale
            )
    judge = judge_create(name="judge", model_ref="tiny", project=project)
    v1 = judge.prompts.get(version=1)
    sa, sb, sc = steps_of(a), steps_of(b), steps_of(c)
    judge_run(
        judge,
        v1,
        {sa[0]: 1, sa[1]: -1, sa[2]: -1, sb[0]: 1, sb[1]: -1, sc[0]: 1, sc[1]: 1},
    )
    judge_run(judge, v1, {sc[0]: None})
    return {"judge": judge, "v1": v1, "a": a, "b": b, "c": c, "ann": ann}


def row(result: Any, version: int) -> Any:
    return next(r for r in result.versions if r.prompt.version == version)


def test_figures_worked_by_hand(project: Project, world: dict[str, Any]) -> None:
    query = alignment_query_build(project, world["judge"], source="human:majority")
    result = alignment_run(query)
    v1 = row(result, 1)
    assert v1.runs == 2
    assert (v1.calls, v1.parse_failures) == (8, 1)
    assert (v1.prompt_tokens, v1.completion_tokens, v1.tokens) == (80, 40, 120)
    figures = v1.figures
    assert (figures.steps, figures.trajectories) == (7, 3)
    assert figures.confusion.tolist() == [[2, 0, 0], [0, 0, 0], [1, 0, 4]]
    assert figures.kappa.value == pytest.approx(16 / 23)
    assert figures.bad_f1.value == pytest.approx(0.8)
    assert figures.first_error_f1.value == pytest.approx(2 / 3)
    for estimate in (figures.kappa, figures.bad_f1, figures.first_error_f1):
        assert estimate.low <= estimate.value <= estimate.high
    # The same source named by the annotator gives the same figures.
    same = alignment_run(alignment_query_build(project, world["judge"], source="human:ann"))
    assert row(same, 1).figures.kappa.value == pytest.approx(16 / 23)
    listed, more = disagreements(query, result, world["v1"])
    assert not more
    assert [(d.trajectory, d.index, d.verdict, d.label_name) for d in listed] == [
        ("A", 1, "-1", "good")
    ]
    assert listed[0].critique == CRITIQUE
    # The majority's reason: of those who voted with it, by name.
    assert listed[0].rationale == "ann: <b>a1 is fine</b>: x is defined"


def test_the_bootstrap_matches_the_shared_metrics() -> None:
    """The vectorised figures equal metrics.agreement's on random data, and the seeded
    intervals are the same twice."""
    scale = Scale((-1, 0, 1), ("bad", "neutral", "good"), -1, 1, True)
    rng = np.random.default_rng(3)
    trajectory = np.repeat(np.arange(40), 5)
    rows = StepRows(
        trajectory,
        np.tile(np.arange(5), 40),
        rng.choice([-1, 0, 1], size=trajectory.size).astype(np.float64),
        rng.random(trajectory.size),
        np.zeros_like(trajectory),
    )
    figures = version_figures(rows, scale)
    shared = model_human_metrics(rows, scale, threshold=0.5, sweep=False)
    assert figures.kappa.value == pytest.approx(shared.kappa)
    assert figures.bad_f1.value == pytest.approx(shared.detection.f1)
    assert figures.first_error_f1.value == pytest.approx(shared.first_error.f1)
    assert figures.confusion.tolist() == shared.confusion.tolist()
    assert version_figures(rows, scale).kappa == figures.kappa
    assert figures.kappa.low < figures.kappa.value < figures.kappa.high
    empty = version_figures(StepRows.empty(), scale)
    assert math.isnan(empty.kappa.value) and math.isnan(empty.kappa.low)


def test_examples_are_left_out_of_their_version(project: Project, world: dict[str, Any]) -> None:
    """Version 2 shows A's step 1 as an example, so A is left out of version 2's figures
    (where A is judged perfectly: counted, it would raise kappa). Over B and C: B's bad
    step missed, so kappa 0, bad-step F1 0, first-error F1 0; 4 steps."""
    judge, a, b, c = world["judge"], world["a"], world["b"], world["c"]
    source = LabelSource("human", "majority")
    v2 = judge_examples_add(
        project=project, scorer=judge, base=world["v1"], step_ids=[steps_of(a)[1].pk], source=source
    )
    assert (v2.version, v2.example_steps) == (2, [steps_of(a)[1].pk])
    sa, sb, sc = steps_of(a), steps_of(b), steps_of(c)
    judge_run(judge, v2, {sa[0]: 1, sa[1]: 1, sa[2]: -1, sb[0]: 1, sb[1]: 1, sc[0]: 1, sc[1]: 1})
    result = alignment_run(alignment_query_build(project, judge, source="human:majority"))
    second = row(result, 2)
    assert second.left_out == 1
    assert (second.figures.steps, second.figures.trajectories) == (4, 2)
    assert second.figures.confusion.tolist() == [[0, 0, 1], [0, 0, 0], [0, 0, 3]]
    assert second.figures.kappa.value == pytest.approx(0.0)
    assert second.figures.first_error_f1.value == pytest.approx(0.0)
    # Version 1 had no examples: still all seven steps.
    assert row(result, 1).figures.steps == 7
    listed, _ = disagreements(alignment_query_build(project, judge), result, v2)
    assert [(d.trajectory, d.index) for d in listed] == [("B", 1)]
    # Counted with A, the same replies would agree more: the exclusion is what holds it.
    JudgePrompt.objects.filter(pk=v2.pk).update(example_steps=[])
    leaked = row(alignment_run(alignment_query_build(project, judge)), 2).figures
    assert leaked.steps == 7 and leaked.kappa.value > 0.5


def test_attribution_accuracy_per_version(project: Project, world: dict[str, Any]) -> None:
    """Failure verdicts count for the version of the newest reply on their trajectory,
    against the annotator's decisive failures: B right (agent and step), C wrong agent
    and step, A without a human decisive failure is not counted."""
    judge, ann = world["judge"], world["ann"]
    for trajectory, agent, step in ((world["b"], "solver", 1), (world["c"], "solver", 1)):
        TrajectoryLabel.objects.create(
            trajectory=trajectory,
            annotator=ann,
            decisive_agent=agent,
            decisive_step=step,
            status=TrajectoryLabel.Status.SUBMITTED,
        )
    for trajectory, agent, step in (
        (world["a"], "solver", 2),
        (world["b"], "solver", 1),
        (world["c"], "checker", 0),
    ):
        FailureVerdict.objects.create(trajectory=trajectory, scorer=judge, agent=agent, step=step)
    result = alignment_run(alignment_query_build(project, judge, source="human:ann"))
    assert str(result.query.decisive) == "human:ann"
    decisive = row(result, 1).decisive
    assert (decisive.agent.correct, decisive.agent.total) == (1, 2)
    assert (decisive.step.correct, decisive.step.total) == (1, 2)


# --- The page and the API -------------------------------------------------------------------


def page_url(judge: Scorer, **params: str) -> str:
    return reverse("judge-alignment", args=["demo", judge.pk])


def test_page_shows_each_version_and_escapes_model_output(
    world: dict[str, Any], owner: User, client: Client
) -> None:
    client.force_login(owner)
    response = client.get(page_url(world["judge"]), {"source": "human:majority"})
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="version-1"' in html and "0.70" in html
    assert "&lt;script&gt;alert(&#x27;critique&#x27;)&lt;/script&gt;" in html
    assert "<script>alert" not in html
    assert "&lt;b&gt;a1 is fine&lt;/b&gt;" in html
    assert f'name="step" value="{steps_of(world["a"])[1].pk}"' in html
    # HTMX asks for the body alone when the source changes.
    partial = client.get(
        page_url(world["judge"]),
        {"source": "human:ann"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="alignment-body",
    )
    assert partial.status_code == 200
    body = partial.content.decode()
    assert body.lstrip().startswith('<div id="alignment-body">') and "<html" not in body


def test_compare_page_and_scoring_section_link_to_the_page(
    world: dict[str, Any], owner: User, client: Client
) -> None:
    client.force_login(owner)
    url = page_url(world["judge"])
    assert (
        url in client.get(reverse("compare", args=["demo"]), {"scorer": "judge"}).content.decode()
    )
    assert url in client.get(reverse("scoring-section", args=["demo"])).content.decode()


def test_use_as_examples_makes_a_new_version(
    project: Project, world: dict[str, Any], owner: User, client: Client
) -> None:
    judge = world["judge"]
    step = steps_of(world["a"])[1]
    client.force_login(owner)
    response = client.post(
        reverse("judge-alignment-examples", args=["demo", judge.pk]),
        {"source": "human:majority", "version": "1", "step": [str(step.pk)]},
    )
    assert response.status_code == 302
    made = judge.prompts.get(version=2)
    assert made.example_steps == [step.pk]
    assert made.note == "v1 + 1 example"
    assert made.created_by == owner
    # The step's text (its braces literal), the human's label as the answer, the reason.
    rendered = made.template.format(task="T", history="H", step="S", step_number="9")
    assert "a1 uses {x} and {{y}}" in rendered
    assert "A person's verdict on step 1: correct, so the answer is \\boxed{+1}" in rendered
    assert "Their reason: ann: <b>a1 is fine</b>: x is defined" in rendered
    assert rendered.rstrip().endswith("\\boxed{-1} if it is wrong.")
    page = client.get(response["Location"]).content.decode()
    assert "Version 2" in page and "has no runs yet" in page and "Score with version 2" in page
    # A version made from version 2 adds to its block.
    third = judge_examples_add(
        project=project,
        scorer=judge,
        base=made,
        step_ids=[steps_of(world["b"])[1].pk],
        source=LabelSource("human", "majority"),
    )
    assert third.example_steps == [step.pk, steps_of(world["b"])[1].pk]
    assert third.template.count(END) == 1 and "Example 2" in third.template


def test_score_with_a_version_starts_a_run(
    world: dict[str, Any], owner: User, client: Client, celery_worker: Any
) -> None:
    judge = world["judge"]
    client.force_login(owner)
    response = client.post(
        reverse("judge-alignment-score", args=["demo", judge.pk]),
        {"version": "1", "source": "human:majority"},
    )
    assert response.status_code == 302
    run = ScoringRun.objects.filter(scorer=judge).order_by("-id").first()
    assert run is not None and run.prompt == world["v1"] and run.created_by == owner


def test_bad_input_is_refused_naming_it(
    project: Project, world: dict[str, Any], owner: User, annotator: User, client: Client
) -> None:
    judge = world["judge"]
    before = judge.prompts.count()
    client.force_login(owner)
    url = page_url(judge)
    unknown = client.get(url, {"source": "human:nobody"})
    assert unknown.status_code == 400 and "nobody is called" in unknown.content.decode()
    model = client.get(url, {"source": "model:judge"})
    assert model.status_code == 400 and "not a human label source" in model.content.decode()
    plain = Scorer.objects.create(project=project, name="prm", kind=prm.TOKEN_CLASSIFICATION)
    not_judge = client.get(reverse("judge-alignment", args=["demo", plain.pk]))
    assert not_judge.status_code == 400
    assert "not an llm-judge" in not_judge.content.decode()
    elsewhere = project_create(slug="other", name="Other")
    stranger = trajectory_with_steps(elsewhere, ["x"])
    examples = reverse("judge-alignment-examples", args=["demo", judge.pk])
    outside = client.post(
        examples,
        {"source": "human:majority", "version": "1", "step": [str(steps_of(stranger)[0].pk)]},
    )
    assert outside.status_code == 400
    assert f"step {steps_of(stranger)[0].pk}: no such step in project 'demo'" in unescape(
        outside.content.decode()
    )
    none = client.post(examples, {"source": "human:majority", "version": "1"})
    assert none.status_code == 400 and "choose at least one" in none.content.decode()
    no_version = client.post(examples, {"source": "human:majority", "version": "7", "step": ["1"]})
    assert no_version.status_code == 400
    assert "no prompt version '7'" in unescape(no_version.content.decode())
    assert judge.prompts.count() == before
    # Another project's judge is not there; annotators may read but not post.
    other_judge = judge_create(name="j2", model_ref="tiny", project=elsewhere)
    assert client.get(reverse("judge-alignment", args=["demo", other_judge.pk])).status_code == 404
    client.force_login(annotator)
    assert client.get(url).status_code == 200
    step = steps_of(world["a"])[1]
    refused = client.post(examples, {"source": "human:majority", "version": "1", "step": [step.pk]})
    assert refused.status_code == 403
    assert judge.prompts.count() == before
    made = judge_examples_add(
        project=project,
        scorer=judge,
        base=world["v1"],
        step_ids=[step.pk],
        source=LabelSource("human", "majority"),
    )
    with pytest.raises(ExampleError, match=f"step {step.pk} is already an example of version 2"):
        judge_examples_add(
            project=project,
            scorer=judge,
            base=made,
            step_ids=[step.pk],
            source=LabelSource("human", "majority"),
        )


def test_outsider_gets_404(world: dict[str, Any], outsider: User, client: Client) -> None:
    judge = world["judge"]
    client.force_login(outsider)
    assert client.get(page_url(judge)).status_code == 404
    for name in ("judge-alignment-examples", "judge-alignment-score"):
        assert (
            client.post(reverse(name, args=["demo", judge.pk]), {"version": "1"}).status_code == 404
        )
    assert api(outsider).get(f"/api/v1/scorers/{judge.pk}/alignment/").status_code == 404


def test_api_gives_the_same_figures(world: dict[str, Any], owner: User) -> None:
    judge = world["judge"]
    client = api(owner)
    url = f"/api/v1/scorers/{judge.pk}/alignment/"
    data = client.get(url, {"source": "human:majority"}).json()
    assert data["scorer"] == "judge" and data["mode"] == "per-step"
    first = data["versions"][0]
    assert first["version"] == 1 and first["calls"] == 8 and first["parse_failures"] == 1
    assert first["steps"]["kappa"]["value"] == pytest.approx(16 / 23)
    assert first["steps"]["first_error_f1"]["value"] == pytest.approx(2 / 3)
    bad = client.get(url, {"source": "human:nobody"})
    assert bad.status_code == 400 and "nobody is called" in bad.json()["source"]
    plain = Scorer.objects.create(project=judge.project, name="prm", kind=prm.TOKEN_CLASSIFICATION)
    not_judge = client.get(f"/api/v1/scorers/{plain.pk}/alignment/")
    assert not_judge.status_code == 400 and "not an llm-judge" in not_judge.json()["scorer"]


def test_trajectory_mode_replies_give_step_values(project: Project, world: dict[str, Any]) -> None:
    """A trajectory-mode judge names the first wrong step: the steps before it count
    good, that step bad, later ones unjudged; -1 makes every step good. On A (human
    [+1, +1, -1]) it names step 1: A0 good (agrees), A1 bad (disagrees), A2 not counted;
    on C (human [+1, +1]) it says -1: both good."""
    judge = judge_create(
        name="pb-judge", model_ref="tiny", project=project, parameters={"mode": "trajectory"}
    )
    prompt = judge.prompts.get(version=1)
    run = ScoringRun.objects.create(
        project=project, scorer=judge, prompt=prompt, status=ScoringRun.Status.DONE
    )
    for trajectory, verdict in ((world["a"], 1), (world["c"], -1)):
        JudgeReply.objects.create(
            run=run,
            scorer=judge,
            prompt=prompt,
            key=f"t{trajectory.pk}",
            trajectory=trajectory,
            text=f"\\boxed{{{verdict}}}",
            critique="step 1 divides by zero" if verdict == 1 else "all fine",
            verdict=verdict,
        )
    query = alignment_query_build(project, judge, source="human:majority")
    result = alignment_run(query)
    figures = row(result, 1).figures
    assert (figures.steps, figures.trajectories) == (4, 2)
    assert figures.confusion.tolist() == [[0, 0, 0], [0, 0, 0], [1, 0, 3]]
    listed, _ = disagreements(query, result, prompt)
    assert [(d.trajectory, d.index, d.verdict) for d in listed] == [("A", 1, "first wrong step 1")]
    assert listed[0].critique == "step 1 divides by zero"


def test_disagreements_come_a_page_at_a_time(
    project: Project, world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version that answers every step against the human label disagrees on all
    seven (each is good or bad): three a page, in trajectory and step order."""
    from evaluation import alignment as alignment_module

    monkeypatch.setattr(alignment_module, "PAGE_SIZE", 3)
    judge = world["judge"]
    contrary = JudgePrompt.objects.create(scorer=judge, version=2, template="{step}")
    answers: dict[Step, int | None] = {}
    for trajectory, labels in (
        (world["a"], [1, 1, -1]),
        (world["b"], [1, -1]),
        (world["c"], [1, 1]),
    ):
        for step, label in zip(steps_of(trajectory), labels, strict=True):
            answers[step] = -label
    judge_run(judge, contrary, answers)
    query = alignment_query_build(project, judge)
    result = alignment_run(query)
    pages = [disagreements(query, result, contrary, page=n) for n in (1, 2, 3)]
    assert [len(listed) for listed, _ in pages] == [3, 3, 1]
    assert [more for _, more in pages] == [True, True, False]
    seen = [(d.trajectory, d.index) for listed, _ in pages for d in listed]
    assert seen == [("A", 0), ("A", 1), ("A", 2), ("B", 0), ("B", 1), ("C", 0), ("C", 1)]
    assert row(result, 2).figures.kappa.value < 0


def test_the_prompts_api_shows_a_versions_examples(
    project: Project, world: dict[str, Any], owner: User
) -> None:
    step = steps_of(world["a"])[1]
    judge_examples_add(
        project=project,
        scorer=world["judge"],
        base=world["v1"],
        step_ids=[step.pk],
        source=LabelSource("human", "majority"),
    )
    versions = api(owner).get(f"/api/v1/scorers/{world['judge'].pk}/prompts/").json()
    listed = versions["results"] if isinstance(versions, dict) else versions
    assert [(v["version"], v["example_steps"]) for v in listed] == [(2, [step.pk]), (1, [])]
