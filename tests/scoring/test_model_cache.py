"""The one model cache a worker holds, whatever the kind of model."""

from __future__ import annotations

from scoring.prm.cache import LoadedModels


def test_scorers_and_policies_share_one_limit() -> None:
    cache = LoadedModels(max_loaded=2)
    scorer = cache.get("scorer:a", object)
    cache.get("policy:b", object)
    assert cache.get("scorer:a", object) is scorer  # used again: now the most recent
    cache.get("policy:c", object)
    assert len(cache) == 2
    assert cache.get("scorer:a", object) is scorer
    assert cache.loads == 3
    cache.get("policy:b", object)  # dropped by the limit, so built again
    assert cache.loads == 4
