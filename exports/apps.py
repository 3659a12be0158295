from django.apps import AppConfig


class ExportsConfig(AppConfig):
    name = "exports"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from evaluation.kept import summary_register
        from exports.selectors import CHOICES_PAGE, choice_counts_make

        # The export page's counts are kept as the compare pages' summaries are.
        summary_register(CHOICES_PAGE, choice_counts_make)
