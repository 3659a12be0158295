from __future__ import annotations

from typing import Any

from rest_framework import serializers

from accounts.models import ApiToken
from accounts.services import MAX_EXPIRY_DAYS
from stepscope.serializers import StrictSerializer


class ApiTokenSerializer(serializers.ModelSerializer[ApiToken]):
    key = serializers.CharField(source="token_key", read_only=True, help_text="the token's start")
    expires_at = serializers.DateTimeField(source="expiry", read_only=True)
    created_at = serializers.DateTimeField(source="created", read_only=True)

    class Meta:
        model = ApiToken
        fields = ["key", "name", "created_at", "last_used_at", "expires_at"]
        read_only_fields = fields


class ApiTokenCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100)
    expires_in_days = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_EXPIRY_DAYS,
        help_text="left out: the token lasts until revoked",
    )


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    token = serializers.SerializerMethodField(help_text="the secret: shown this once only")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields

    def get_token(self, token: Any) -> str:
        return str(self.context["secret"])
