from django.apps import AppConfig


class ScoringConfig(AppConfig):
    name = "scoring"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the trajectory filter on credits with trajectories_filtered, the
        # model: label source with labeling's label sources, and what labeling queues'
        # "most uncertain first" order ranks by.
        from scoring import filters, queue_order, sources  # noqa: F401
