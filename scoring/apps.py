from django.apps import AppConfig


class ScoringConfig(AppConfig):
    name = "scoring"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the trajectory filter on credits and the score column with trajectories, the
        # model: label source with labeling's label sources, and what labeling queues'
        # "most uncertain first" order ranks by, the model: decisive-failure source and the
        # judge: rubric source.
        from scoring import (  # noqa: F401
            columns,
            failure_source,
            filters,
            queue_order,
            rubric_source,
            sources,
        )
        from scoring.model_policy import model_policy
        from scoring.prm import model_refs

        # Every model load in this process (web, worker, command) checks its model_ref
        # and trust_remote_code against the operator's settings.
        model_refs.POLICY_SOURCE = model_policy
