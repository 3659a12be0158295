from django.apps import AppConfig


class HomeConfig(AppConfig):
    """The project list and each project's home: the pages that gather every app's
    numbers and sections, so they sit above all of them."""

    name = "home"

    def ready(self) -> None:
        from evaluation.kept import summary_register
        from home.summary import PAGE, step_counts

        summary_register(PAGE, step_counts)
