"""The trajectory page's evidence, one part at a time (#37): a columns request reads the
steps of its range, a step request its step, the top part at most ``STRIP_CELLS`` strip
cells; and the first errors the database finds are those the Python rule (the one the
page used before, over every step) finds."""

from __future__ import annotations

import itertools
import random
import re

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from labeling.models import StepLabel
from scoring import methods, prm
from scoring.evidence import PAGE_STEPS, STRIP_CELLS, STRIP_RUNS, trajectory_evidence
from scoring.models import AttributionRun, Scorer, ScoringRun, StepCredit, StepScore
from tests.factories import TrajectoryFactory, UserFactory, trajectory_with_steps
from trajectories.models import Project, Step, Trajectory

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
LONG = 2 * STRIP_CELLS + 500  # 2,500 steps: strips in runs of 12 or 13, three table pages


def browser(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def scored(project: Project, trajectory: Trajectory, values: list[float | None]) -> Scorer:
    scorer = Scorer.objects.create(project=project, name="ext", kind=prm.EXTERNAL, queue="q")
    steps = list(trajectory.steps.order_by("index"))
    StepScore.objects.bulk_create(
        StepScore(step=step, scorer=scorer, value=value)
        for step, value in zip(steps, values, strict=True)
        if value is not None
    )
    ScoringRun.objects.create(
        project=project, scorer=scorer, kind=ScoringRun.Kind.IMPORT, status="done"
    )
    return scorer


@pytest.fixture
def long(project: Project) -> Trajectory:
    """2,500 steps, scored 0.9 except a late drop to 0.2 at step 2,100."""
    trajectory = trajectory_with_steps(project, [f"s{n}" for n in range(LONG)], task_key="q")
    scored(project, trajectory, [0.2 if n >= 2100 else 0.9 for n in range(LONG)])
    return trajectory


def evidence_sql(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if "first_prm" in q["sql"]]


def test_columns_read_only_their_range(project: Project, owner: User, long: Trajectory) -> None:
    url = reverse("trajectory-evidence", args=[long.pk])
    with CaptureQueriesContext(connection) as queries:
        response = browser(owner).get(
            url, {"part": "columns", "from": "1000", "to": "1020"}, headers=HTMX
        )
    text = response.content.decode()
    (sql,) = evidence_sql(queries)  # one query for the evidence
    assert "s.index >= 1000 AND s.index < 1020" in sql
    assert text.count("hx-swap-oob") == 20
    shown = {int(n) for n in re.findall(r'aria-label="Scores and credit of step (\d+)"', text)}
    assert shown == set(range(1000, 1020))
    # The first error (a whole-trajectory fact) is not in this range: no flag.
    assert "1st error" not in text
    flagged = browser(owner).get(
        url, {"part": "columns", "from": "2090", "to": "2110"}, headers=HTMX
    )
    assert flagged.content.decode().count("1st error · PRM") == 1
    # The selector hands back the range's steps only: no strip, no pickers.
    found = trajectory_evidence(
        long, user_id=owner.pk, show_scores=True, blind=False, low=1000, high=1020, top=False
    )
    assert [s.index for s in found.steps] == list(range(1000, 1020))
    assert found.strip == [] and found.scorers == []
    assert found.first_errors[0][:2] == ("PRM", 2100)


def test_columns_without_an_end_stop_after_a_page(
    project: Project, owner: User, long: Trajectory
) -> None:
    url = reverse("trajectory-evidence", args=[long.pk])
    text = browser(owner).get(url, {"part": "columns", "from": "0"}, headers=HTMX).content.decode()
    assert text.count("hx-swap-oob") == PAGE_STEPS


def test_one_step_reads_one_step(project: Project, owner: User, long: Trajectory) -> None:
    step = long.steps.get(index=2100)
    url = reverse("trajectory-evidence", args=[long.pk])
    with CaptureQueriesContext(connection) as queries:
        response = browser(owner).get(url, {"part": "step", "step": str(step.pk)}, headers=HTMX)
    (sql,) = evidence_sql(queries)
    assert f"s.id = {step.pk}" in sql
    text = response.content.decode()
    assert text.lstrip().startswith("<aside") and "1st error · PRM" in text and ">0.20<" in text
    other = trajectory_with_steps(project, ["x"], task_key="other")
    elsewhere = browser(owner).get(
        url, {"part": "step", "step": str(other.steps.get().pk)}, headers=HTMX
    )
    assert elsewhere.status_code == 404


def test_top_of_a_long_trajectory_draws_runs_of_steps(
    project: Project, owner: User, long: Trajectory
) -> None:
    url = reverse("trajectory-evidence", args=[long.pk])
    with CaptureQueriesContext(connection) as queries:
        top = browser(owner).get(url, {"part": "top"}, headers=HTMX).content.decode()
    (sql,) = evidence_sql(queries)
    assert "s.index >= 0 AND s.index < 0" in sql  # no step's column
    strip = top.split('id="score-strip"')[1].split("</div>")[0]
    dash = "\N{EN DASH}"
    cells = re.findall(rf'title="steps (\d+){dash}(\d+): lowest ([\d.]+)"', strip)
    assert len(cells) == STRIP_RUNS == strip.count("score-cell")
    assert 'class="score-strip runs"' in top
    # The runs cover every step once, in order.
    assert int(cells[0][0]) == 0 and int(cells[-1][1]) == LONG - 1
    assert all(int(b[0]) == int(a[1]) + 1 for a, b in itertools.pairwise(cells))
    # A run holding the drop shows its lowest score, and links to the page of its steps.
    dropped = [c for c in cells if int(c[1]) >= 2100]
    assert dropped and all(c[2] == "0.200" for c in dropped)
    assert all(c[2] == "0.900" for c in cells if int(c[1]) < 2100)
    steps_url = reverse("trajectory-steps", args=[long.pk])
    assert f'href="{steps_url}?step=0"' in strip
    assert "PRM · step 2100" in top


def test_top_of_a_short_trajectory_has_a_cell_per_step(project: Project, owner: User) -> None:
    trajectory = trajectory_with_steps(project, [f"s{n}" for n in range(STRIP_CELLS)])
    scored(project, trajectory, [0.5 + n / 4000 for n in range(STRIP_CELLS)])
    url = reverse("trajectory-evidence", args=[trajectory.pk])
    top = browser(owner).get(url, {"part": "top"}, headers=HTMX).content.decode()
    strip = top.split('id="score-strip"')[1].split("</div>")[0]
    titles = re.findall(r'title="step (\d+): ([\d.]+)"', strip)
    assert [int(i) for i, _ in titles] == list(range(STRIP_CELLS))
    assert titles[4] == ("4", "0.501") and "steps " not in strip and " runs" not in top
    first = trajectory.steps.get(index=0)
    assert f'href="#step-{first.pk}"' in strip


def test_the_page_without_javascript_shows_a_page_of_steps(
    project: Project, owner: User, long: Trajectory
) -> None:
    client = browser(owner)
    url = reverse("trajectory-evidence", args=[long.pk])
    first = client.get(url).content.decode()
    rows = re.findall(r'#step-\d+">(\d+)</a></td>', first)
    assert [int(r) for r in rows] == list(range(PAGE_STEPS))
    assert f'href="?from={PAGE_STEPS}"' in first and 'rel="prev"' not in first
    assert f"Steps 0\N{EN DASH}{PAGE_STEPS - 1} of {LONG}" in first
    last = client.get(url, {"from": 2 * PAGE_STEPS}).content.decode()
    rows = re.findall(r'#step-\d+">(\d+)</a></td>', last)
    assert [int(r) for r in rows] == list(range(2 * PAGE_STEPS, LONG))
    assert f'href="?from={PAGE_STEPS}" rel="prev"' in last and 'rel="next"' not in last
    # The flag of a step on another page is still listed on top.
    assert "PRM · step 2100" in first


# --- The first-error rule: the database's against the Python rule over every step ---------


def python_first_errors(
    trajectory: Trajectory, scorer: Scorer, mc: AttributionRun
) -> list[tuple[str, int]]:
    """The page's rule before #37: labels' first negative step per annotator, then the
    PRM's first step under 0.5 among those scored, then the first collapsed MC value
    among those valued, where the task ever succeeds (methods.first_error_prm/_mc)."""
    steps = list(trajectory.steps.order_by("index"))
    scores = dict(StepScore.objects.filter(scorer=scorer).values_list("step_id", "value"))
    credits = {c.step_id: c for c in StepCredit.objects.filter(run=mc)}
    found: list[tuple[str, int]] = []
    labels: dict[str, int] = {}
    for label in StepLabel.objects.filter(step__trajectory=trajectory, value__lt=0):
        name = label.annotator.username
        labels[name] = min(labels.get(name, label.step.index), label.step.index)
    found += sorted(labels.items(), key=lambda item: (item[1], item[0]))
    scored_steps = [s for s in steps if s.pk in scores]
    if scored_steps:
        values = np.array([scores[s.pk] for s in scored_steps], dtype=np.float64)
        first = methods.first_error_prm(values, np.array([0, values.size]))
        if first[0] >= 0:
            found.append(("PRM", scored_steps[int(first[0])].index))
    valued = [s for s in steps if s.pk in credits and credits[s.pk].level is not None]
    if valued:
        levels = np.array([credits[s.pk].level for s in valued], dtype=np.float64)
        head = credits[valued[0].pk]
        root = np.array([float(head.level or 0.0) - head.value], dtype=np.float64)
        first = methods.first_error_mc(levels, np.array([0, levels.size]), root)
        if first[0] >= 0:
            found.append(("MC", valued[int(first[0])].index))
    return found


@pytest.mark.parametrize("seed", range(12))
def test_first_errors_match_the_python_rule(project: Project, owner: User, seed: int) -> None:
    rng = random.Random(seed)
    count = rng.randint(1, 60)
    trajectory = trajectory_with_steps(project, [f"s{n}" for n in range(count)], task_key="q")
    # Scores on some steps, now and then under 0.5 (or exactly 0.5, which is no error).
    values = [
        None if rng.random() < 0.3 else rng.choice([0.5, rng.random(), 0.6 + rng.random() / 3])
        for _ in range(count)
    ]
    scorer = scored(project, trajectory, values)
    # MC values on some steps: a task that never succeeds (root 0) in some seeds.
    mc = AttributionRun.objects.create(project=project, method="mc-prefix", key=f"mc{seed}")
    never = rng.random() < 0.25
    steps = list(trajectory.steps.order_by("index"))
    StepCredit.objects.bulk_create(
        StepCredit(
            step=step,
            run=mc,
            value=level if never else level - rng.choice([0.0, 0.2, 0.5]),
            level=level,
        )
        for step in steps
        if rng.random() < 0.8
        for level in [rng.choice([0.0, 0.0, 0.25, 0.5, 1.0])]
    )
    annotators = [UserFactory.create(username=f"ann{seed}-{n}") for n in range(2)]
    schema = project.label_schemas.get()
    for annotator in annotators:
        for step in rng.sample(steps, min(3, count)):
            StepLabel.objects.create(
                step=step, annotator=annotator, schema=schema, value=rng.choice([-1, 1])
            )
    expected = python_first_errors(trajectory, scorer, mc)
    found = trajectory_evidence(trajectory, user_id=owner.pk, show_scores=True, blind=False)
    assert [(who, index) for who, index, _ in found.first_errors] == expected
    by_index = {s.index: s.pk for s in steps}
    assert all(pk == by_index[index] for _, index, pk in found.first_errors)
    # A columns read of part of the steps flags those of its range, and no other.
    low, high = count // 3, 2 * count // 3 + 1
    part = trajectory_evidence(
        trajectory,
        user_id=owner.pk,
        show_scores=True,
        blind=False,
        low=low,
        high=high,
        top=False,
    )
    assert {(who, s.index) for s in part.steps for who in s.first_error} == {
        (who, index) for who, index in expected if low <= index < high
    }


def test_the_python_rule_is_the_methods_rule(project: Project, owner: User) -> None:
    """The reference above is not vacuous: a known trajectory's flags, by hand."""
    trajectory = trajectory_with_steps(project, ["a", "b", "c", "d"], task_key="q")
    scorer = scored(project, trajectory, [0.9, None, 0.5, 0.4])
    mc = AttributionRun.objects.create(project=project, method="mc-prefix", key="mc")
    steps = list(trajectory.steps.order_by("index"))
    for step, level in zip(steps[1:], [0.5, 0.0, 0.0], strict=True):
        StepCredit.objects.create(step=step, run=mc, value=level - 0.25, level=level)
    StepLabel.objects.create(
        step=steps[2], annotator=owner, schema=project.label_schemas.get(), value=-1
    )
    expected = [("owner", 2), ("PRM", 3), ("MC", 2)]
    assert python_first_errors(trajectory, scorer, mc) == expected
    found = trajectory_evidence(trajectory, user_id=owner.pk, show_scores=True, blind=False)
    assert [(who, index) for who, index, _ in found.first_errors] == expected
    assert Step.objects.filter(trajectory=trajectory).count() == 4


# --- Which runs credit a trajectory (#37: read by step ranges, not per step) --------------


def interleaved(project: Project, names: tuple[str, str], count: int) -> list[Trajectory]:
    """Two trajectories whose steps were written in turns: each one's step ids lie in the
    other's range (as concurrent imports leave them), so a step id range alone does not
    say whose step a credit is on."""
    pair = [
        TrajectoryFactory.create(project=project, external_id=name, step_count=count)
        for name in names
    ]
    Step.objects.bulk_create(
        Step(trajectory=trajectory, index=index, kind="thought", role="assistant", content="x")
        for index in range(count)
        for trajectory in pair
    )
    return pair


def credit(run: AttributionRun, trajectory: Trajectory, value: float) -> None:
    StepCredit.objects.bulk_create(
        StepCredit(step=step, run=run, value=value * (1 if step.index % 2 else -1), level=0.5)
        for step in trajectory.steps.all()
    )


def test_only_the_runs_that_credit_a_trajectory_are_listed(project: Project, owner: User) -> None:
    mixed, other = interleaved(project, ("mixed", "other"), 6)
    alone = trajectory_with_steps(project, [f"s{n}" for n in range(5)], task_key="a")
    bare = trajectory_with_steps(project, ["a", "b"], task_key="b")
    # Created oldest first: ``wide`` is the newest credit run, with the largest credits.
    some = AttributionRun.objects.create(project=project, method="returns", key="some")
    never = AttributionRun.objects.create(project=project, method="gae", key="never")
    wide = AttributionRun.objects.create(project=project, method="prm-delta", key="wide")
    mc = AttributionRun.objects.create(project=project, method="mc-prefix", key="mc")
    credit(some, mixed, 0.25)
    credit(some, alone, 0.5)
    # On steps inside ``mixed``'s id range, and larger than ``mixed``'s.
    credit(some, other, 0.6)
    credit(wide, other, 0.75)
    credit(mc, other, 0.1)

    def shown(
        trajectory: Trajectory, run_id: int | None = None
    ) -> tuple[list[int], int | None, float]:
        """The runs listed, the MC run and the colour scale; and checks that the steps
        and the strip show the chosen run's credits on this trajectory, and no other."""
        found = trajectory_evidence(
            trajectory, user_id=owner.pk, show_scores=True, blind=False, run_id=run_id
        )
        given = dict(
            StepCredit.objects.filter(
                run=found.run.pk if found.run else None, step__trajectory=trajectory
            ).values_list("step__index", "value")
        )
        assert {s.index: s.credit for s in found.steps} == {
            index: given.get(index) for index in range(trajectory.step_count)
        }
        assert [(c.index, c.credit) for c in found.strip] == [
            (index, given.get(index)) for index in range(trajectory.step_count)
        ]
        return [r.pk for r in found.runs], found.mc_run, found.credit_scale

    assert shown(mixed) == ([some.pk], None, 0.25)
    assert shown(other) == ([mc.pk, wide.pk, some.pk], mc.pk, 0.1)
    assert shown(other, run_id=wide.pk) == ([mc.pk, wide.pk, some.pk], mc.pk, 0.75)
    assert shown(other, run_id=some.pk) == ([mc.pk, wide.pk, some.pk], mc.pk, 0.6)
    assert shown(alone) == ([some.pk], None, 0.5)
    # A run asked for that does not credit the trajectory: the newest that does.
    assert shown(alone, run_id=never.pk) == ([some.pk], None, 0.5)
    assert shown(alone, run_id=wide.pk) == ([some.pk], None, 0.5)
    assert shown(bare) == ([], None, 1.0)
    assert not trajectory_evidence(bare, user_id=owner.pk, show_scores=True, blind=False).run
    # The page shows the same: the picker lists the runs, the columns the chosen one's.
    client = browser(owner)
    url = reverse("trajectory-evidence", args=[mixed.pk])
    top = client.get(url, {"part": "top"}, headers=HTMX).content.decode()
    assert f"#{some.pk} returns" in top
    assert f"#{wide.pk} prm-delta" not in top and f"#{never.pk} gae" not in top
    columns = client.get(url, {"part": "columns", "from": "0", "to": "6"}, headers=HTMX)
    text = columns.content.decode()
    assert text.count("+0.250") == 3 and text.count("-0.250") == 3
    assert "0.750" not in text and "0.100" not in text and "0.600" not in text
