from django.apps import AppConfig


class ScoringConfig(AppConfig):
    name = "scoring"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the trajectory filter on credits with trajectories_filtered, and the
        # model: label source with labeling's label sources.
        from scoring import filters, sources  # noqa: F401
