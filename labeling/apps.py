from django.apps import AppConfig


class LabelingConfig(AppConfig):
    name = "labeling"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the trajectory filters on labels with trajectories_filtered, and the
        # default label schema with project_create.
        from labeling import filters, projects  # noqa: F401
