"""What labeling adds to a new project: the default ternary label schema, created inside
trajectories' project_create, which ``LabelingConfig.ready()`` registers it with."""

from __future__ import annotations

from labeling.models import TERNARY_VALUES, LabelSchema
from trajectories.models import Project
from trajectories.services.projects import project_created_register


@project_created_register("default_schema")
def default_schema_create(project: Project) -> None:
    LabelSchema.objects.create(project=project, values=TERNARY_VALUES)
