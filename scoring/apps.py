from django.apps import AppConfig


class ScoringConfig(AppConfig):
    name = "scoring"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the trajectory filter on credits and the score column with trajectories, the
        # model: label source with labeling's label sources, and what labeling queues'
        # "most uncertain first" order ranks by, and the model: decisive-failure source.
        from scoring import columns, filters, queue_order, sources, verdicts  # noqa: F401
