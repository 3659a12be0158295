"""``/api/v1/tokens/``: the user's own API tokens. Listing shows each token's start,
name, last use and expiry, never the secret; ``POST`` makes one and answers with its
secret once; ``{key}/revoke/`` revokes one. Another user's token is a 404."""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from accounts import selectors, services
from accounts.models import ApiToken
from accounts.serializers import (
    ApiTokenCreatedSerializer,
    ApiTokenCreateSerializer,
    ApiTokenSerializer,
)


class ApiTokenViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    serializer_class = ApiTokenSerializer
    pagination_class = None
    lookup_field = "token_key"
    lookup_url_kwarg = "key"
    lookup_value_regex = "[A-Za-z0-9_]+"

    def get_queryset(self) -> QuerySet[ApiToken]:
        return selectors.api_tokens_for_user(self.request.user)

    @extend_schema(request=ApiTokenCreateSerializer, responses={201: ApiTokenCreatedSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Make a token; the answer's ``token`` is its secret, shown this once."""
        incoming = ApiTokenCreateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        try:
            token, secret = services.api_token_create(
                user=cast(User, request.user),
                name=data["name"],
                expires_in_days=data.get("expires_in_days"),
            )
        except services.TokenError as error:
            raise ValidationError({error.field: [error.message]}) from None
        body = ApiTokenCreatedSerializer(token, context={"secret": secret}).data
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: ApiTokenSerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, key: str = "", **kwargs: Any) -> Response:
        """Revoke one of your tokens: it stops working at once."""
        token = services.api_token_revoke(user=cast(User, request.user), key=key)
        return Response(ApiTokenSerializer(token).data)


router = SimpleRouter()
router.register("tokens", ApiTokenViewSet, basename="api-token")

urlpatterns: list[URLPattern | URLResolver] = [path("", include(router.urls))]
