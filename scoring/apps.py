from django.apps import AppConfig


class ScoringConfig(AppConfig):
    name = "scoring"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the trajectory filter on credits with trajectories_filtered.
        from scoring import filters  # noqa: F401
