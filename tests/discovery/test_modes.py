"""The failure-mode clustering (discovery/modes.py), without a database: average linkage
against hand-worked cases, the silhouette's choice of k, names by distinctive words,
numbers kept across runs."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from discovery.modes import (
    PreviousMode,
    average_linkage_cuts,
    cluster_words,
    cosine_distances,
    failure_modes,
    purity,
    silhouette,
)

TEXTS = {
    0: "The tool returned an error and the agent ignored the error message",
    1: "Agent ignored the tool error message and went on",
    2: "Tool error was ignored; the agent assumed success",
    3: "The agent computed the wrong total price in the arithmetic",
    4: "Arithmetic mistake: the total price is wrong",
    5: "Wrong arithmetic for the total price of the order",
    6: "The agent gave up and told the user it cannot assist",
    7: "Gave up early, telling the user it cannot assist further",
}


def blobs(per: int = 4, k: int = 3, dim: int = 16, noise: float = 0.05, seed: int = 1):
    rng = np.random.default_rng(seed)
    centres = np.eye(dim)[:k]
    rows = [centres[c] + noise * rng.standard_normal(dim) for c in range(k) for _ in range(per)]
    return np.array(rows), [c for c in range(k) for _ in range(per)]


def test_average_linkage_matches_a_hand_worked_case() -> None:
    # Points on a line at 0, 1, 5, 6, 20: merges (0,1) at 1, (5,6) at 1, then the two
    # pairs at the mean distance 5, then 20 last.
    x = np.array([0.0, 1.0, 5.0, 6.0, 20.0])
    distances = np.abs(x[:, None] - x[None, :])
    cuts = average_linkage_cuts(distances, [2, 3])
    assert cuts[3].tolist() == [0, 0, 1, 1, 2]
    assert cuts[2].tolist() == [0, 0, 0, 0, 1]


def test_silhouette_of_two_tight_pairs_is_high_and_of_a_bad_split_low() -> None:
    x = np.array([0.0, 0.1, 10.0, 10.1])
    distances = np.abs(x[:, None] - x[None, :])
    assert silhouette(distances, np.array([0, 0, 1, 1])) > 0.98
    assert silhouette(distances, np.array([0, 1, 0, 1])) < 0


def test_silhouette_picks_the_number_of_blobs() -> None:
    for k in (2, 3, 5):
        vectors, truth = blobs(k=k)
        found = failure_modes(vectors, ["x"] * len(truth), list(range(len(truth))))
        assert found.k == k
        groups = [[truth[row] for row in mode.members] for mode in found.modes]
        assert all(len(set(g)) == 1 for g in groups)


def test_modes_are_largest_first_with_central_examples() -> None:
    vectors, _ = blobs(per=6, k=2)
    vectors = np.vstack([vectors, vectors[:3] * 1.01])  # the first blob is larger
    found = failure_modes(vectors, ["x"] * len(vectors), list(range(len(vectors))))
    assert [len(m.members) for m in found.modes] == [9, 6]
    assert all(set(m.examples) <= set(m.members) and len(m.examples) == 3 for m in found.modes)


def test_names_are_the_clusters_distinctive_words() -> None:
    clusters = [[0, 1, 2], [3, 4, 5], [6, 7]]
    words = cluster_words(list(TEXTS.values()), clusters)
    assert {"error", "ignored"} <= set(words[0])
    assert {"arithmetic", "price", "total"} == set(words[1])
    assert {"assist", "gave"} <= set(words[2])
    # A word every cluster shares ("agent") names none.
    assert all("agent" not in w for w in words)


def test_numbers_and_names_stay_where_members_mostly_stay() -> None:
    vectors, truth = blobs(per=4, k=3)
    texts = [["tool error ignored", "wrong total price", "gave up"][c] for c in truth]
    keys = [f"t{i}" for i in range(len(truth))]
    first = failure_modes(vectors, texts, keys)
    previous = [
        PreviousMode(m.number, f"renamed {m.number}", frozenset(keys[r] for r in m.members))
        for m in first.modes
    ]
    # More data: each blob gains one member, and a fourth blob appears.
    more, more_truth = blobs(per=5, k=4, seed=2)
    more_keys = []
    counters = dict.fromkeys(range(4), 0)
    for c in more_truth:
        i = counters[c]
        counters[c] += 1
        more_keys.append(f"t{c * 4 + i}" if c < 3 and i < 4 else f"new{c}-{i}")
    again = failure_modes(more, ["x"] * len(more_keys), more_keys, previous=previous)
    kept = {m.number: m.name for m in again.modes if m.previous is not None}
    assert kept == {m.number: f"renamed {m.number}" for m in first.modes}
    (new,) = [m for m in again.modes if m.previous is None]
    assert new.number == 4


def test_a_mode_that_lost_most_members_gets_a_new_number() -> None:
    vectors, _ = blobs(per=4, k=2)
    keys = list(range(8))
    previous = [PreviousMode(7, "old", frozenset({0, 1, 100, 101, 102, 103}))]
    found = failure_modes(vectors, ["x"] * 8, keys, previous=previous)
    assert sorted(m.number for m in found.modes) == [8, 9]


def test_few_rows_make_one_mode_and_none_make_none() -> None:
    assert failure_modes(np.zeros((0, 4)), [], []).modes == []
    one = failure_modes(np.eye(4)[:2], ["a b c", "a b d"], [1, 2])
    assert len(one.modes) == 1 and one.modes[0].members == (0, 1)


def test_a_large_input_is_sampled_and_every_row_assigned() -> None:
    vectors, truth = blobs(per=600, k=3, noise=0.05)
    found = failure_modes(vectors, ["x"] * len(truth), list(range(len(truth))))
    assert found.k == 3
    assert sorted(r for m in found.modes for r in m.members) == list(range(len(truth)))
    assert purity([m.members for m in found.modes], dict(enumerate(truth))) == 1.0


def test_purity() -> None:
    truth = {1: "a", 2: "a", 3: "b", 4: "b", 5: "b"}
    assert purity([[1, 2, 3], [4, 5]], truth) == pytest.approx(4 / 5)


def test_the_module_loads_neither_django_nor_sklearn() -> None:
    code = (
        "import sys, discovery.modes; bad = [m for m in sys.modules if m.split('.')[0] in"
        " ('django', 'sklearn', 'scipy', 'torch')]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cosine_distances_are_zero_on_the_diagonal() -> None:
    d = cosine_distances(np.eye(3))
    assert d.diagonal().tolist() == [0, 0, 0] and d[0, 1] == 1
