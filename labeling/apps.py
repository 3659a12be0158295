from django.apps import AppConfig


class LabelingConfig(AppConfig):
    name = "labeling"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the trajectory filters and list columns on labels with trajectories, the
        # default label schema with project_create, and the imported labels' writer with
        # the import writer.
        from labeling import columns, filters, imported, projects  # noqa: F401
