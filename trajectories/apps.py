from django.apps import AppConfig


class TrajectoriesConfig(AppConfig):
    name = "trajectories"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the list's filters and columns on RL training facts.
        from trajectories import training_filters  # noqa: F401
