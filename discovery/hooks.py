"""What this app hangs on the lower apps' hooks: the semantic narrowing of the selection
language, and an embedding pass after each arrival."""

from __future__ import annotations

from trajectories.arrivals import arrival_listener_register


def install() -> None:
    from discovery import filters  # noqa: F401  (registers the narrowing)
    from discovery.services import embeddings_arrived

    arrival_listener_register(embeddings_arrived)
