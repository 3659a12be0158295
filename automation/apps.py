from django.apps import AppConfig


class AutomationConfig(AppConfig):
    """Rules that act as trajectories arrive, and signed webhooks. The lower apps offer
    the hooks (``trajectories.arrivals``, ``stepscope.events``); this app fills them."""

    name = "automation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from automation import hooks

        hooks.install()
