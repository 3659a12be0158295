from django.apps import AppConfig


class RolloutsConfig(AppConfig):
    name = "rollouts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the ``rollout`` import format, so continuations exported as Stepscope
        # JSONL with their metadata import again with their branch links.
        from rollouts import continuations  # noqa: F401
