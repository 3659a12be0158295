"""API tokens: named, stored hashed, shown once, last use recorded, optional expiry,
revoked at once; from the API and from the tokens page. DRF authtoken keys keep
working beside them."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework.authtoken.models import Token

from accounts.models import ApiToken
from accounts.services import api_token_create
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def bearer(secret: str) -> Client:
    return Client(headers={"Authorization": f"Token {secret}"})


def make(client: Client, **data: Any) -> Any:
    return client.post(reverse("api-token-list"), data, content_type="application/json")


def test_a_token_is_shown_once_stored_hashed_and_works(owner: User) -> None:
    session = Client()
    session.force_login(owner)
    created = make(session, name="training job", expires_in_days=30)
    assert created.status_code == 201, created.json()
    secret = created.json()["token"]
    assert secret.startswith("ssk_") and len(secret) > 60
    stored = ApiToken.objects.get()
    assert stored.name == "training job" and secret not in (stored.digest, stored.token_key)
    assert secret.startswith(stored.token_key)
    assert stored.expiry is not None
    assert stored.expiry - timezone.now() > dt.timedelta(days=29)

    listed = session.get(reverse("api-token-list")).json()
    assert listed == [
        {
            "key": stored.token_key,
            "name": "training job",
            "created_at": listed[0]["created_at"],
            "last_used_at": None,
            "expires_at": listed[0]["expires_at"],
        }
    ]
    assert secret not in session.get(reverse("api-token-list")).content.decode()

    client = bearer(secret)
    projects = client.get("/api/v1/projects/")
    assert projects.status_code == 200 and [p["slug"] for p in projects.json()] == ["demo"]
    stored.refresh_from_db()
    assert stored.last_used_at is not None


def test_revoked_expired_and_unknown_tokens_get_401_saying_why(owner: User) -> None:
    token, secret = api_token_create(user=owner, name="ci")
    client = bearer(secret)
    assert client.get("/api/v1/projects/").status_code == 200
    revoked = client.post(reverse("api-token-revoke", args=[token.token_key]))
    assert revoked.status_code == 200 and revoked.json()["name"] == "ci"
    refused = client.get("/api/v1/projects/")
    assert refused.status_code == 401
    assert "revoked, has expired or was never issued" in refused.json()["detail"]
    assert "Authorization" in refused.json()["detail"]

    old, old_secret = api_token_create(user=owner, name="old", expires_in_days=1)
    ApiToken.objects.filter(pk=old.pk).update(expiry=timezone.now() - dt.timedelta(seconds=1))
    assert bearer(old_secret).get("/api/v1/projects/").status_code == 401
    assert bearer("ssk_" + "x" * 60).get("/api/v1/projects/").status_code == 401


def test_a_call_looks_up_the_presented_token_only(owner: User) -> None:
    """Knox also read all of the user's tokens on every call, to delete the expired
    ones; an expired token other than the one presented stays, marked by its expiry."""
    _, secret = api_token_create(user=owner, name="ci")
    stale, _ = api_token_create(user=owner, name="stale", expires_in_days=1)
    ApiToken.objects.filter(pk=stale.pk).update(expiry=timezone.now() - dt.timedelta(seconds=1))
    client = bearer(secret)
    assert client.get("/api/v1/projects/").status_code == 200  # last use written once
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/api/v1/projects/").status_code == 200
    reads = [q["sql"] for q in queries.captured_queries if "accounts_apitoken" in q["sql"]]
    assert len(reads) == 1, reads
    assert ApiToken.objects.filter(pk=stale.pk).exists()


def test_another_users_token_cannot_be_seen_or_revoked(owner: User, annotator: User) -> None:
    theirs, their_secret = api_token_create(user=owner, name="owner's")
    _, mine = api_token_create(user=annotator, name="mine")
    client = bearer(mine)
    assert [t["name"] for t in client.get(reverse("api-token-list")).json()] == ["mine"]
    assert client.post(reverse("api-token-revoke", args=[theirs.token_key])).status_code == 404
    assert bearer(their_secret).get("/api/v1/projects/").status_code == 200
    page = Client()
    page.force_login(annotator)
    assert page.post(reverse("token-revoke", args=[theirs.token_key])).status_code == 404
    assert ApiToken.objects.filter(pk=theirs.pk).exists()


def test_bad_requests_name_the_field(owner: User) -> None:
    session = Client()
    session.force_login(owner)
    assert make(session, name="a", expires_in_days=0).json() == {
        "expires_in_days": ["Ensure this value is greater than or equal to 1."]
    }
    assert make(session, name="a", scope="all").json() == {"scope": ["Unknown field."]}
    assert make(session, name="a").status_code == 201
    duplicate = make(session, name="a")
    assert duplicate.status_code == 400
    assert duplicate.json() == {"name": ["You have a token named 'a' already."]}
    assert make(session, name="   ").status_code == 400
    assert ApiToken.objects.count() == 1


def test_drf_authtoken_keys_keep_working(owner: User) -> None:
    key = Token.objects.create(user=owner).key
    assert bearer(key).get("/api/v1/projects/").status_code == 200
    assert bearer(key + "x").get("/api/v1/projects/").status_code == 401


def test_the_tokens_page_makes_shows_once_and_revokes(owner: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    page = client.get(reverse("token-list"))
    assert page.status_code == 200 and "No tokens yet." in page.content.decode()
    csrf = page.cookies["csrftoken"].value
    refused = client.post(reverse("token-list"), {"name": "laptop"})
    assert refused.status_code == 403  # no CSRF token
    made = client.post(
        reverse("token-list"),
        {"name": "laptop", "csrfmiddlewaretoken": csrf},
        HTTP_HX_REQUEST="true",
    )
    assert made.status_code == 200
    token = ApiToken.objects.get(user=owner)
    body = made.content.decode()
    assert 'id="token-secret"' in body and f"{token.token_key}" in body
    secret = body.split('<code class="token-value">')[1].split("</code>")[0]
    assert bearer(secret).get("/api/v1/projects/").status_code == 200
    # Shown once: the page never has it again.
    assert secret not in client.get(reverse("token-list")).content.decode()
    revoked = client.post(
        reverse("token-revoke", args=[token.token_key]), {"csrfmiddlewaretoken": csrf}
    )
    assert revoked.status_code == 302
    assert not ApiToken.objects.exists()
    assert bearer(secret).get("/api/v1/projects/").status_code == 401


def test_the_header_links_to_the_tokens_page(owner: User) -> None:
    client = Client()
    client.force_login(owner)
    assert f'href="{reverse("token-list")}"' in client.get(reverse("project-list")).content.decode()


def test_a_new_user_sees_only_their_own_page(db: None) -> None:
    user = UserFactory.create(username="newcomer")
    client = Client()
    client.force_login(user)
    assert client.get(reverse("token-list")).status_code == 200
    assert Client().get(reverse("token-list")).status_code == 302  # to the login page


def test_the_schema_describes_token_authentication_and_the_token_routes(owner: User) -> None:
    client = Client()
    client.force_login(owner)
    schema = client.get(reverse("api-schema")).content.decode()
    assert "apiToken" in schema and "/api/v1/tokens/{key}/revoke/" in schema
