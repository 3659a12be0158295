from django.apps import AppConfig


class HomeConfig(AppConfig):
    """The project list and each project's home: the pages that gather every app's
    numbers and sections, so they sit above all of them."""

    name = "home"
