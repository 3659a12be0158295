"""A task's rollouts as a prefix tree with Monte Carlo values."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.factories import trajectory_with_steps
from trajectories.models import Project
from trajectories.prefix_tree import segments


def test_segments_fold_unbranched_runs_and_mark_the_split() -> None:
    rollouts = [["a", "b", "c"], ["a", "b", "d", "e"], ["a", "x"], ["a", "b", "c"]]
    result = segments(rollouts, [1, 0, 0, 1])
    shape = [(s.depth, s.start_index, s.length, s.visits, round(s.value, 3)) for s in result]
    assert shape == [
        (0, 0, 1, 4, 0.5),  # a: all four rollouts, half succeed
        (1, 1, 1, 3, 0.667),  # a-b
        (2, 2, 1, 2, 1.0),  # a-b-c: both succeed
        (2, 2, 2, 1, 0.0),  # a-b-d-e folded into one segment
        (1, 1, 1, 1, 0.0),  # a-x
    ]
    assert [s.splits_outcomes for s in result] == [True, True, False, False, False]
    assert result[2].advantage == pytest.approx(1.0 - 2 / 3)


def test_a_rollout_that_ends_where_another_goes_on_ends_its_segment() -> None:
    """A continuation's source is a prefix of its continuations: the segment stops where
    the shorter rollout ends, so each segment's rollout has every step of the segment
    (the page looks up its first and last step there)."""
    source = [f"s{n}" for n in range(7)]
    continuations = [[*source[:4], f"c{k}", f"c{k}-end"] for k in range(8)]
    longer = [*source, "extra"]
    rollouts = [source, *continuations, longer]
    result = segments(rollouts, [0.0] + [1.0] * 8 + [0.0])
    for segment in result:
        assert segment.start_index + segment.length <= len(rollouts[segment.rollout])
    lengths = [(s.start_index, s.length, s.visits) for s in result]
    assert (4, 3, 2) in lengths, "s4..s6 stop where the source ends"
    assert (7, 1, 1) in lengths, "the longer rollout's extra step is a segment of its own"


@pytest.mark.django_db
def test_tree_page_shows_values_and_hides_from_outsiders(
    client: Client, project: Project, owner: User, outsider: User
) -> None:
    trajectory_with_steps(project, ["plan", "good move", "win"], success=True, task_key="t")
    trajectory_with_steps(project, ["plan", "bad move", "lose"], success=False, task_key="t")
    trajectory_with_steps(project, ["plan", "bad move", "lose"], success=None, task_key="t")
    client.force_login(owner)
    page = client.get(f"/p/{project.slug}/tree/", {"task": "t"})
    assert page.status_code == 200
    rows = page.context["rows"]
    assert [(r["segment"].visits, r["segment"].value) for r in rows] == [
        (2, 0.5),
        (1, 1.0),
        (1, 0.0),
    ]
    assert page.context["rollouts"].unknown_outcome == 1
    assert b"branch point" in page.content
    # A rollout continued from its fourth step, and one that goes past its end.
    trajectory_with_steps(
        project, ["plan", "good move", "win", "celebrate"], success=True, task_key="t"
    )
    page = client.get(f"/p/{project.slug}/tree/", {"task": "t"})
    assert page.status_code == 200
    assert "celebrate" in [r["last"].preview for r in page.context["rows"]]
    client.force_login(outsider)
    assert client.get(f"/p/{project.slug}/tree/", {"task": "t"}).status_code == 404
