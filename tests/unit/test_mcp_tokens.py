"""Bearer tokens map to scopes: the token file is checked at start, unknown callers get 401."""

from __future__ import annotations

import json

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Send
from starlette.types import Scope as AsgiScope

from memoryd.services.mcp.tokens import SCOPE_KEY, BearerScopes, parse_token_map, token_digest
from memoryd.shared.contracts import Scope

ALICE_TOKEN = "alice-0123456789abcdef"
ALICE = Scope(tenant="acme", user_id="alice", agent_id="travel-bot")


def test_the_token_file_maps_each_tokens_digest_to_its_scope() -> None:
    """Tokens are kept as digests; each scope is validated as a Scope."""
    text = json.dumps(
        {ALICE_TOKEN: {"tenant": "acme", "user_id": "alice", "agent_id": "travel-bot"}}
    )

    assert {token_digest(ALICE_TOKEN): ALICE} == parse_token_map(text)


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ({"short": {"tenant": "acme", "user_id": "a"}}, "token #1 is shorter than 16 characters"),
        ({ALICE_TOKEN: {"tenant": "acme.*", "user_id": "a"}}, "token #1: tenant: String should"),
        ({ALICE_TOKEN: {"tenant": "acme"}}, "token #1: user_id: Field required"),
        ([], "expected an object of tokens to scopes"),
    ],
)
def test_a_bad_token_file_is_refused_without_showing_a_token(
    entries: object, expected: str
) -> None:
    """A bad entry is named by its position, never by its token."""
    with pytest.raises(ValueError) as refused:
        parse_token_map(json.dumps(entries))

    assert str(refused.value).startswith(expected)
    assert ALICE_TOKEN not in str(refused.value)


async def echo_scope(scope: AsgiScope, receive: Receive, send: Send) -> None:
    """Answer with the scope the middleware bound."""
    bound = Request(scope).scope[SCOPE_KEY]
    await JSONResponse(bound.model_dump(mode="json"))(scope, receive, send)


def client() -> httpx.AsyncClient:
    app = BearerScopes(echo_scope, {token_digest(ALICE_TOKEN): ALICE})
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


@pytest.mark.parametrize(
    ("headers", "description"),
    [
        ({}, "a bearer token is required"),
        ({"Authorization": "Bearer not-a-known-token-at-all"}, "unknown bearer token"),
        ({"Authorization": f"Basic {ALICE_TOKEN}"}, "a bearer token is required"),
    ],
)
async def test_a_missing_or_unknown_token_is_refused_with_401(
    headers: dict[str, str], description: str
) -> None:
    """No token, an unknown one or another scheme: 401 with a Bearer challenge."""
    async with client() as http:
        response = await http.post("/mcp", headers=headers)

    assert 401 == response.status_code
    assert response.headers["www-authenticate"].startswith('Bearer error="invalid_token"')
    assert description == response.json()["error_description"]


async def test_a_known_token_passes_with_its_scope_bound() -> None:
    """The request reaches the app with the token's scope, not one the caller chose."""
    async with client() as http:
        response = await http.post("/mcp", headers={"Authorization": f"Bearer {ALICE_TOKEN}"})

    assert 200 == response.status_code
    assert ALICE == Scope.model_validate(response.json())
