"""What every app's API serializers share."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class StrictSerializer(serializers.Serializer[Any]):
    """Refuses fields it does not know, naming them, instead of ignoring them: a typo
    (``rationle``) would otherwise be a silent no-op."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({key: ["Unknown field."] for key in unknown})
        return super().to_internal_value(data)
