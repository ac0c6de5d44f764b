"""The HTTP API in process: the scope each request is bound to, its events, its OpenAPI document.

The routes run on httpx's ASGI transport with a fake ``MemoryClient`` that records what it was
asked; tests/integration/test_http.py runs the real server against a real memoryd.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from memoryd.services.http.app import (
    create_app,
    event_frame,
    render_openapi,
    stream_start,
)
from memoryd.services.http.errors import ApiError
from memoryd.services.runtime.tokens import Grant, token_digest
from memoryd.shared.contracts import Scope
from memoryd.shared.contracts.browse import UserMemory
from memoryd.shared.contracts.memories import MemoryList
from memoryd.shared.contracts.notifications import parse_notification
from memoryd.shared.settings import Settings

OPENAPI = Path(__file__).resolve().parents[2] / "schemas" / "http" / "openapi.json"
ALICE_TOKEN = "alice-of-acme-0123456789"
APP_TOKEN = "app-of-acme-0123456789"


class RecordingClient:
    """A stand-in for ``MemoryClient``: records each call's scope and answers as if it worked."""

    def __init__(self) -> None:
        self.scopes: list[Scope] = []

    async def record_turn(self, scope: Scope, query: str, response: str) -> uuid.UUID:
        self.scopes.append(scope)
        return uuid.uuid4()

    async def list_memories(self, scope: Scope, **_options: Any) -> MemoryList:
        self.scopes.append(scope)
        return MemoryList(memories=[], total=0)

    async def browse(self, scope: Scope, **_options: Any) -> UserMemory:
        self.scopes.append(scope)
        lists = ("pages", "segments", "profile", "traits", "knowledge", "agent_traits")
        lists += ("memories", "entities", "relations")
        nothing: dict[str, Any] = {name: [] for name in lists}
        now = datetime.now(UTC)
        return UserMemory(
            tenant=scope.tenant, user_id=scope.user_id, read_at=now, memory_count=0, **nothing
        )


@pytest.fixture
def recording() -> RecordingClient:
    return RecordingClient()


@pytest.fixture
def http(recording: RecordingClient) -> httpx.AsyncClient:
    """Return an httpx client of the app, Alice's token and a tenant-wide one in its file."""
    grants = {
        token_digest(ALICE_TOKEN): Grant(tenant="acme", user_id="alice", agent_id="bot"),
        token_digest(APP_TOKEN): Grant(tenant="acme"),
    }
    app = create_app(Settings(), grants)
    app.state.client = recording  # what the lifespan would connect
    transport = httpx.ASGITransport(app=app)
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_user_token_writes_in_its_own_scope(
    http: httpx.AsyncClient, recording: RecordingClient
) -> None:
    """A user-bound token's turn is recorded for its tenant, user and agent."""
    turn = {"query": "hi", "response": "hello"}
    answer = await http.post("/v1/turns", json=turn, headers=bearer(ALICE_TOKEN))

    assert 202 == answer.status_code
    assert [Scope(tenant="acme", user_id="alice", agent_id="bot")] == recording.scopes


async def test_a_tenant_wide_token_names_the_user_per_request(
    http: httpx.AsyncClient, recording: RecordingClient
) -> None:
    """The app's token serves the user in the query string, and refuses to guess one."""
    named = await http.get("/v1/memories?user_id=bob&agent_id=bot", headers=bearer(APP_TOKEN))
    nameless = await http.get("/v1/memories", headers=bearer(APP_TOKEN))

    assert 200 == named.status_code
    assert [Scope(tenant="acme", user_id="bob", agent_id="bot")] == recording.scopes
    assert 422 == nameless.status_code
    assert {
        "code": "invalid_request",
        "message": "user_id: this token serves a whole tenant: name a user",
    } == nameless.json()


@pytest.mark.parametrize(
    "path",
    [
        "/v1/memories?user_id=bob",
        "/v1/memories?agent_id=other",
        "/v1/memories?tenant=globex",
        "/v1/memories?search_scope=global",
        "/v1/notifications?user_id=bob",
        "/v1/notifications?tenant=globex",
        "/v1/browse?user_id=bob",
        "/v1/browse?tenant=globex",
    ],
)
async def test_a_user_token_cannot_widen_its_scope(
    http: httpx.AsyncClient, recording: RecordingClient, path: str
) -> None:
    """Another user, agent or tenant, or the whole tenant, is 403 and nothing is asked."""
    answer = await http.get(path, headers=bearer(ALICE_TOKEN))

    assert (403, "forbidden") == (answer.status_code, answer.json()["code"])
    assert [] == recording.scopes


async def test_the_browser_view_is_the_tokens_user_or_the_one_a_tenant_token_names(
    http: httpx.AsyncClient, recording: RecordingClient
) -> None:
    """/v1/browse reads the token's user; a tenant-wide token names one; a bad limit is 422."""
    own = await http.get("/v1/browse", headers=bearer(ALICE_TOKEN))
    named = await http.get("/v1/browse?user_id=bob", headers=bearer(APP_TOKEN))
    too_many = await http.get("/v1/browse?limit=0", headers=bearer(ALICE_TOKEN))

    assert (200, "alice") == (own.status_code, own.json()["user_id"])
    assert (200, "bob") == (named.status_code, named.json()["user_id"])
    assert (422, "invalid_request") == (too_many.status_code, too_many.json()["code"])
    assert too_many.json()["message"].startswith("limit: Input should be greater than")
    assert ["alice", "bob"] == [scope.user_id for scope in recording.scopes]


async def test_the_browser_page_loads_without_a_token_and_runs_only_its_own_script(
    http: httpx.AsyncClient,
) -> None:
    """The page is served to anyone (it holds no data); its policy allows only its script."""
    page = await http.get("/browser")

    policy = page.headers["content-security-policy"]
    assert 200 == page.status_code and "text/html" in page.headers["content-type"]
    assert "memory browser" in page.text and 'fetch(path + "?"' in page.text
    assert "script-src 'sha256-" in policy and "unsafe-inline" not in policy.split(";")[1]
    assert "frame-ancestors 'none'" in policy and "connect-src 'self'" in policy
    assert "innerHTML" not in page.text  # memories are shown as text, never parsed as HTML


async def test_an_unforeseen_failure_is_a_500_error_body_without_its_detail(
    recording: RecordingClient,
) -> None:
    """A bug behind a route answers {code: internal} and keeps its message to the log."""
    grants = {token_digest(ALICE_TOKEN): Grant(tenant="acme", user_id="alice")}
    app = create_app(Settings(), grants)

    async def broken(*_args: Any) -> uuid.UUID:
        raise RuntimeError("secret detail")

    recording.record_turn = broken  # type: ignore[method-assign]
    app.state.client = recording
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        turn = {"query": "hi", "response": "hello"}
        answer = await http.post("/v1/turns", json=turn, headers=bearer(ALICE_TOKEN))

    assert 500 == answer.status_code
    assert {"code": "internal", "message": "memoryd failed on this request"} == answer.json()


async def test_an_unknown_route_answers_the_error_body(http: httpx.AsyncClient) -> None:
    """Even a 404 is a {code, message} body."""
    answer = await http.get("/v1/nothing", headers=bearer(ALICE_TOKEN))

    assert (404, "not_found") == (answer.status_code, answer.json()["code"])


def test_an_event_carries_the_stream_sequence_the_kind_and_the_notification() -> None:
    """One notification is one event: its id resumes after it, its data parses back."""
    note = parse_notification(
        b'{"kind": "memory.stored", "tenant": "acme", "user_id": "alice", "agent_id": "bot", '
        b'"session_id": null, "event_id": "5f0c6a8e-3c1e-4d8e-9a41-0d1f2b3c4d5e", '
        b'"stream_seq": 7}'
    )
    frame = event_frame(42, note)
    lines = frame.splitlines()

    assert ["id: 42", "event: memory.stored"] == lines[:2]
    assert note == parse_notification(lines[2].removeprefix("data: ").encode())
    assert frame.endswith("\n\n")


def test_a_stream_resumes_after_the_last_event_id_or_starts_now() -> None:
    """Last-Event-ID 41 starts at 42; without it, at the oldest kept or from now."""
    before = datetime.now(UTC)
    now = stream_start(None, None)

    assert 42 == stream_start("41", None)
    assert "all" == stream_start(None, "all")
    assert isinstance(now, datetime) and before <= now
    with pytest.raises(ApiError):
        stream_start("latest", None)


def test_the_openapi_document_matches_the_app() -> None:
    """schemas/http/openapi.json is what the app serves (run `memoryd schemas` after a change)."""
    assert OPENAPI.read_text() == render_openapi()
