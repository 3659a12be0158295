"""``/api/v1/projects/{slug}/members/`` and ``…/invites/``: the members page as an API,
for the project's admins, through the same services and rules (a role that exists, the
last admin kept, every change recorded). Outsiders get 404, other members 403; writes
are POSTs, as everywhere in the API."""

from __future__ import annotations

from typing import cast

from django.contrib.auth.models import User
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from trajectories import selectors, services
from trajectories.models import Membership, MembershipEvent, MembershipInvite, Project

# What only a project admin may do here (the 403 says it).
ADMINS_DO = "manage members"


class MemberSerializer(serializers.ModelSerializer[Membership]):
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "username", "role"]
        read_only_fields = fields


class MemberAddSerializer(serializers.Serializer[dict[str, str]]):
    username = serializers.CharField(max_length=150)
    role = serializers.CharField(max_length=20, default=Membership.Role.ANNOTATOR)


class RoleSerializer(serializers.Serializer[dict[str, str]]):
    role = serializers.CharField(max_length=20)


class MemberEventSerializer(serializers.ModelSerializer[MembershipEvent]):
    actor = serializers.CharField(source="actor.username", read_only=True, default=None)
    member = serializers.CharField(source="member_username", read_only=True)

    class Meta:
        model = MembershipEvent
        fields = ["id", "created_at", "actor", "member", "action", "role_before", "role_after"]
        read_only_fields = fields


class InviteSerializer(serializers.ModelSerializer[MembershipInvite]):
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)

    class Meta:
        model = MembershipInvite
        fields = ["id", "role", "created_by", "created_at", "expires_at"]
        read_only_fields = fields


class InviteCreatedSerializer(InviteSerializer):
    link = serializers.SerializerMethodField()

    class Meta(InviteSerializer.Meta):
        fields = [*InviteSerializer.Meta.fields, "link"]
        read_only_fields = fields

    def get_link(self, invite: MembershipInvite) -> str:
        return str(self.context["link"])


def _refused(error: services.MemberError) -> ValidationError:
    return ValidationError({error.field: [error.message]})


@extend_schema(
    request=MemberAddSerializer, responses={200: MemberSerializer(many=True), 201: MemberSerializer}
)
@api_view(["GET", "POST"])
def member_list(request: Request, slug: str) -> Response:
    """The members; ``POST {"username", "role"}`` adds an existing user."""
    project = selectors.project_get_for_admin(request.user, slug, does=ADMINS_DO)
    if request.method == "GET":
        return Response(MemberSerializer(selectors.project_members(project), many=True).data)
    incoming = MemberAddSerializer(data=request.data)
    incoming.is_valid(raise_exception=True)
    try:
        membership = services.member_add(
            project=project, actor=cast(User, request.user), **incoming.validated_data
        )
    except services.MemberError as error:
        raise _refused(error) from None
    return Response(MemberSerializer(membership).data, status=201)


def _membership(project: Project, pk: int) -> Membership:
    return get_object_or_404(Membership.objects.select_related("user"), pk=pk, project=project)


@extend_schema(request=RoleSerializer, responses=MemberSerializer)
@api_view(["POST"])
def member_role(request: Request, slug: str, pk: int) -> Response:
    """Change a member's role; the last admin is not demoted (400 on ``role``)."""
    project = selectors.project_get_for_admin(request.user, slug, does=ADMINS_DO)
    incoming = RoleSerializer(data=request.data)
    incoming.is_valid(raise_exception=True)
    try:
        membership = services.member_role_set(
            membership=_membership(project, pk),
            actor=cast(User, request.user),
            role=incoming.validated_data["role"],
        )
    except services.MemberError as error:
        raise _refused(error) from None
    return Response(MemberSerializer(membership).data)


@extend_schema(request=None, responses={204: None})
@api_view(["POST"])
def member_remove(request: Request, slug: str, pk: int) -> Response:
    """Remove a member; the last admin is not removed (400 on ``role``)."""
    project = selectors.project_get_for_admin(request.user, slug, does=ADMINS_DO)
    try:
        services.member_remove(membership=_membership(project, pk), actor=cast(User, request.user))
    except services.MemberError as error:
        raise _refused(error) from None
    return Response(status=204)


@extend_schema(responses=MemberEventSerializer(many=True))
@api_view(["GET"])
def member_events(request: Request, slug: str) -> Response:
    """Who changed which membership, when, newest first."""
    project = selectors.project_get_for_admin(request.user, slug, does=ADMINS_DO)
    events = selectors.membership_events_recent(project)
    return Response(MemberEventSerializer(events, many=True).data)


@extend_schema(
    request=RoleSerializer,
    responses={200: InviteSerializer(many=True), 201: InviteCreatedSerializer},
)
@api_view(["GET", "POST"])
def invite_list(request: Request, slug: str) -> Response:
    """Open invite links; ``POST {"role"}`` makes one, whose ``link`` is in this answer
    only (it is stored as a digest)."""
    project = selectors.project_get_for_admin(request.user, slug, does=ADMINS_DO)
    if request.method == "GET":
        return Response(InviteSerializer(selectors.invites_pending(project), many=True).data)
    incoming = RoleSerializer(data=request.data)
    incoming.is_valid(raise_exception=True)
    try:
        invite, secret = services.invite_create(
            project=project, actor=cast(User, request.user), role=incoming.validated_data["role"]
        )
    except services.MemberError as error:
        raise _refused(error) from None
    link = request.build_absolute_uri(reverse("invite-accept", args=[secret]))
    return Response(InviteCreatedSerializer(invite, context={"link": link}).data, status=201)


@extend_schema(request=None, responses={204: None})
@api_view(["POST"])
def invite_revoke(request: Request, slug: str, pk: int) -> Response:
    """Revoke an open link: whoever opens it later is told it is not known."""
    project = selectors.project_get_for_admin(request.user, slug, does=ADMINS_DO)
    invite = get_object_or_404(MembershipInvite, pk=pk, project=project, used_at__isnull=True)
    services.invite_revoke(invite=invite)
    return Response(status=204)


urlpatterns: list[URLPattern] = [
    path("projects/<slug:slug>/members/", member_list, name="api-member-list"),
    path("projects/<slug:slug>/members/events/", member_events, name="api-member-events"),
    path("projects/<slug:slug>/members/<int:pk>/role/", member_role, name="api-member-role"),
    path("projects/<slug:slug>/members/<int:pk>/remove/", member_remove, name="api-member-remove"),
    path("projects/<slug:slug>/invites/", invite_list, name="api-invite-list"),
    path("projects/<slug:slug>/invites/<int:pk>/revoke/", invite_revoke, name="api-invite-revoke"),
]
