from django.apps import AppConfig


class DiscoveryConfig(AppConfig):
    """Semantic search over step and task text (pgvector). Fills the lower apps' hooks:
    the ``similar`` / ``similar_step`` narrowing of the selection language, and an
    embedding pass after each arrival of trajectories."""

    name = "discovery"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from discovery import hooks

        hooks.install()
