from django.apps import AppConfig


class RolloutsConfig(AppConfig):
    name = "rollouts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the ``rollout`` import format, so continuations exported as Stepscope
        # JSONL with their metadata import again with their branch links.
        # And the mc: label source with labeling's label sources.
        # The trajectory page offers "roll out from here" only where a policy can run.
        from labeling.selectors import labeling_state_flag_register
        from rollouts import continuations, sources  # noqa: F401
        from rollouts.selectors import policies_usable_sql

        labeling_state_flag_register("rollouts", policies_usable_sql)
