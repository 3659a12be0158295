from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The demo login and projects `make run` creates; on top of every other app."""

    name = "demo"
