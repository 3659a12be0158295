from __future__ import annotations

from rest_framework import serializers

from trajectories.models import Project, Step, Trajectory


class ProjectSerializer(serializers.ModelSerializer[Project]):
    class Meta:
        model = Project
        fields = ["id", "slug", "name", "guidelines", "settings", "created_at"]


class TrajectorySerializer(serializers.ModelSerializer[Trajectory]):
    project: serializers.SlugRelatedField[Project] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )

    class Meta:
        model = Trajectory
        fields = [
            "id", "project", "external_id", "source_format", "task_key", "task",
            "ground_truth", "model_name", "outcome_reward", "success", "metadata",
            "step_count", "content_hash", "import_batch", "parent", "branch_index",
            "created_at",
        ]  # fmt: skip


class StepSerializer(serializers.ModelSerializer[Step]):
    class Meta:
        model = Step
        fields = [
            "id", "trajectory", "index", "kind", "role", "agent", "content", "tool_name",
            "tool_args", "metadata", "labelable", "prefix_hash",
        ]  # fmt: skip
