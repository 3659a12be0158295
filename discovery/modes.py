"""Failure modes: first-error steps grouped by what they say. Average-linkage
agglomerative clustering on cosine distance between step vectors, the number of
clusters (2 to 8) chosen by silhouette, each cluster named by its distinctive words
(class-based TF-IDF of its steps' texts against the other clusters'), and numbered so
that a re-run on more data keeps the number and name of a cluster whose members mostly
stay (Jaccard of member keys at least ``KEEP_JACCARD``).

numpy only: the web process imports this module (the page reads ``MIN_K`` / ``MAX_K``)
and must not load scikit-learn or scipy."""

# Django-free: plain arrays and strings in, plain dataclasses out; tested without a database.
from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MIN_K = 2
MAX_K = 8
KEEP_JACCARD = 0.5
NAME_WORDS = 3
EXAMPLES = 3
# Clustering keeps the whole distance matrix and scans it once a merge (O(n^3)): past this
# many steps a seeded sample is clustered and the others join their nearest centroid.
MAX_CLUSTERED = 1500

_WORD = re.compile(r"[a-z][a-z0-9_']{2,}")
# Words that say nothing about what went wrong, whatever the cluster.
_STOP_TEXT = """about above after again against all also and any are because been before being
    below between both but can cannot could did does doing down during each few for from
    further had has have having her here hers him his how into its itself just let me more
    most must not now off once only other our ours out over own same she should some such
    than that the their theirs them then there these they this those through too under
    until very was were what when where which while who whom why will with would you your
    yours i'm it's let's we're we'll i'll don't doesn't isn't wasn't aren't won't"""
STOP_WORDS = frozenset(_STOP_TEXT.split())


@dataclass(frozen=True)
class PreviousMode:
    """A mode of the run before: its number, name, description and member keys."""

    number: int
    name: str
    keys: frozenset[Hashable]
    description: str = ""


@dataclass(frozen=True)
class Mode:
    """One cluster: its stable number and name, its distinctive words, the rows (indices
    into the input) it holds, the ``EXAMPLES`` rows nearest its centre, and the previous
    mode it continues (None: new)."""

    number: int
    name: str
    words: tuple[str, ...]
    members: tuple[int, ...]
    examples: tuple[int, ...]
    previous: int | None = None
    description: str = ""


@dataclass(frozen=True)
class Clustering:
    modes: list[Mode] = field(default_factory=list)
    k: int = 0
    silhouette: float | None = None


def failure_modes(
    vectors: np.ndarray,
    texts: Sequence[str],
    keys: Sequence[Hashable],
    *,
    previous: Sequence[PreviousMode] = (),
    max_k: int = MAX_K,
    seed: int = 0,
) -> Clustering:
    """Cluster the rows of ``vectors`` (one per first-error step, with its text and a key
    that identifies it across runs, e.g. its trajectory), largest mode first."""
    n = len(texts)
    if not (len(vectors) == n == len(keys)):
        raise ValueError("vectors, texts and keys must have one row each")
    if n == 0:
        return Clustering()
    unit = _normalised(np.asarray(vectors, dtype=np.float64))
    if n < MIN_K + 1:
        labels = np.zeros(n, dtype=np.int64)
        k, score = 1, None
    else:
        labels, k, score = _best_cut(unit, max_k=max_k, seed=seed)
    members = [tuple(int(i) for i in np.flatnonzero(labels == c)) for c in range(k)]
    members.sort(key=lambda rows: (-len(rows), rows[0]))
    words = cluster_words(texts, members)
    modes = [
        Mode(
            number=0,
            name=" · ".join(found) if found else "(no distinctive words)",
            words=found,
            members=rows,
            examples=_central(unit, rows),
        )
        for rows, found in zip(members, words, strict=True)
    ]
    return Clustering(modes=number_modes(modes, keys, previous), k=k, silhouette=score)


def _normalised(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def cosine_distances(unit: np.ndarray) -> np.ndarray:
    distances = 1.0 - unit @ unit.T
    np.clip(distances, 0.0, 2.0, out=distances)
    np.fill_diagonal(distances, 0.0)
    return distances


def _best_cut(unit: np.ndarray, *, max_k: int, seed: int) -> tuple[np.ndarray, int, float]:
    """Labels 0..k-1 of every row at the k (``MIN_K``..``max_k``) of best silhouette."""
    n = len(unit)
    sample = np.arange(n)
    if n > MAX_CLUSTERED:
        sample = np.sort(np.random.default_rng(seed).choice(n, MAX_CLUSTERED, replace=False))
    distances = cosine_distances(unit[sample])
    top = min(max_k, len(sample) - 1)
    cuts = average_linkage_cuts(distances, range(MIN_K, top + 1))
    best: tuple[float, int] | None = None
    for k, labels in cuts.items():
        score = silhouette(distances, labels)
        if best is None or score > best[0] + 1e-12:
            best = (score, k)
    assert best is not None
    score, k = best
    labels = cuts[k]
    if n > MAX_CLUSTERED:
        centroids = _normalised(np.stack([unit[sample][labels == c].mean(0) for c in range(k)]))
        labels = np.argmax(unit @ centroids.T, axis=1)
        for c in range(k):  # a sampled member keeps its cluster
            labels[sample[cuts[k] == c]] = c
    return labels, k, score


def average_linkage_cuts(distances: np.ndarray, ks: Sequence[int]) -> dict[int, np.ndarray]:
    """Average-linkage (UPGMA) agglomeration over a distance matrix, cut at each of
    ``ks`` clusters: labels 0..k-1 per row, numbered by first row. Ties merge the pair of
    lowest indices, so the answer is the same run to run."""
    n = len(distances)
    wanted = {k for k in ks if 1 <= k <= n}
    work = distances.astype(np.float64, copy=True)
    np.fill_diagonal(work, np.inf)
    size = np.ones(n)
    owner = np.arange(n)  # the cluster (its surviving row) each row is in
    active = n
    cuts: dict[int, np.ndarray] = {}
    if n in wanted:
        cuts[n] = _relabel(owner)
    while active > min(wanted, default=n):
        flat = int(np.argmin(work))
        i, j = divmod(flat, n)
        if i > j:
            i, j = j, i
        # Lance-Williams for average linkage: the merged cluster's distance to each other
        # is the size-weighted mean of its parts'.
        merged = (size[i] * work[i] + size[j] * work[j]) / (size[i] + size[j])
        work[i, :] = merged
        work[:, i] = merged
        work[i, i] = np.inf
        work[j, :] = np.inf
        work[:, j] = np.inf
        size[i] += size[j]
        owner[owner == j] = i
        active -= 1
        if active in wanted:
            cuts[active] = _relabel(owner)
    return cuts


def _relabel(owner: np.ndarray) -> np.ndarray:
    _, labels = np.unique(owner, return_inverse=True)
    return labels.astype(np.int64)


def silhouette(distances: np.ndarray, labels: np.ndarray) -> float:
    """Mean silhouette of the rows (a row alone in its cluster scores 0)."""
    k = int(labels.max()) + 1
    if k < 2:
        return 0.0
    onehot = np.zeros((len(labels), k))
    onehot[np.arange(len(labels)), labels] = 1.0
    sizes = onehot.sum(0)
    sums = distances @ onehot  # row -> total distance to each cluster
    own = sizes[labels]
    a = sums[np.arange(len(labels)), labels] / np.maximum(own - 1, 1)
    other = sums / np.where(sizes > 0, sizes, 1)
    other[np.arange(len(labels)), labels] = np.inf
    b = other.min(1)
    s = np.where(own > 1, (b - a) / np.maximum(np.maximum(a, b), 1e-12), 0.0)
    return float(s.mean())


def _central(unit: np.ndarray, rows: Sequence[int]) -> tuple[int, ...]:
    """The rows nearest the cluster's centre, nearest first."""
    centre = unit[list(rows)].mean(0)
    similarity = unit[list(rows)] @ centre
    order = sorted(range(len(rows)), key=lambda r: (-similarity[r], rows[r]))
    return tuple(rows[r] for r in order[:EXAMPLES])


def words_of(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS and not w.isdigit()}


def cluster_words(
    texts: Sequence[str], clusters: Sequence[Sequence[int]], *, top: int = NAME_WORDS
) -> list[tuple[str, ...]]:
    """Each cluster's most distinctive words by class-based TF-IDF (BERTopic's c-TF-IDF):
    a word's frequency in the cluster (each step counted once) times log(1 + the mean
    words per cluster / the word's frequency over all clusters). A word must be in two of
    the cluster's steps when it has two or more."""
    counts = [Counter(w for row in rows for w in words_of(texts[row])) for rows in clusters]
    overall: Counter[str] = Counter()
    for count in counts:
        overall.update(count)
    mean_words = sum(overall.values()) / max(len(clusters), 1)
    named: list[tuple[str, ...]] = []
    for rows, count in zip(clusters, counts, strict=True):
        total = sum(count.values()) or 1
        floor = 2 if len(rows) >= 2 else 1
        scored = [
            (count[w] / total * math.log(1 + mean_words / overall[w]), w)
            for w in count
            if count[w] >= floor
        ]
        scored.sort(key=lambda pair: (-pair[0], pair[1]))
        named.append(tuple(w for _, w in scored[:top]))
    return named


def number_modes(
    modes: Sequence[Mode], keys: Sequence[Hashable], previous: Sequence[PreviousMode]
) -> list[Mode]:
    """Give each mode the number, name and description of the previous mode whose members
    it mostly shares (Jaccard >= ``KEEP_JACCARD``, best pairs first, one each), and the
    others new numbers after the previous run's highest, largest first."""
    member_keys = [frozenset(keys[row] for row in mode.members) for mode in modes]
    pairs = sorted(
        (
            (-_jaccard(mine, before.keys), m, p)
            for m, mine in enumerate(member_keys)
            for p, before in enumerate(previous)
        ),
    )
    matched: dict[int, PreviousMode] = {}
    taken: set[int] = set()
    for negative, m, p in pairs:
        if -negative < KEEP_JACCARD:
            break
        if m in matched or p in taken:
            continue
        matched[m] = previous[p]
        taken.add(p)
    following = max((before.number for before in previous), default=0) + 1
    numbered: list[Mode] = []
    for m, mode in enumerate(modes):
        before = matched.get(m)
        if before is not None:
            numbered.append(
                Mode(
                    number=before.number,
                    name=before.name,
                    words=mode.words,
                    members=mode.members,
                    examples=mode.examples,
                    previous=before.number,
                    description=before.description,
                )
            )
        else:
            numbered.append(
                Mode(
                    number=following,
                    name=mode.name,
                    words=mode.words,
                    members=mode.members,
                    examples=mode.examples,
                )
            )
            following += 1
    return numbered


def _jaccard(a: frozenset[Hashable], b: frozenset[Hashable]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def purity(clusters: Sequence[Sequence[Any]], truth: Mapping[Any, str]) -> float:
    """The share of items whose cluster's most common true class is their own (items
    without a true class left out)."""
    counted = right = 0
    for members in clusters:
        classes = Counter(truth[m] for m in members if m in truth)
        counted += sum(classes.values())
        right += max(classes.values(), default=0)
    return right / counted if counted else 0.0
