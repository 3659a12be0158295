from django.apps import AppConfig


class RolloutsConfig(AppConfig):
    name = "rollouts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the ``rollout`` import format, so continuations exported as Stepscope
        # JSONL with their metadata import again with their branch links.
        # And the mc: label source with labeling's label sources.
        from rollouts import continuations, sources  # noqa: F401
