"""`memoryd http` as a real uvicorn process, driven with httpx against a running memoryd.

The API runs against real nats-server and real workers, and binds every request to the
tenant (and user) its bearer token maps to; a request never widens it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memoryd.services.bootstrap import ALL_COMPONENTS, Stack
from memoryd.services.runtime.tokens import Grant
from memoryd.shared.adapters.embedded_nats import _port_open, free_port
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope
from tests.conftest import StackFactory, unique, user_messages

pytestmark = pytest.mark.integration

TOKEN_A = "token-of-alice-in-a-0123456789"
TOKEN_B = "token-of-alice-in-b-0123456789"
TOKEN_TENANT_A = "token-of-tenant-a-0123456789"
EVENT_WAIT_SECONDS = 60.0


@pytest.fixture
def grants() -> dict[str, Grant]:
    """Return a user token in tenant A, one in tenant B (the same user name), and A's app."""
    a, b = unique("a"), unique("b")
    return {
        TOKEN_A: Grant(tenant=a, user_id="alice", agent_id="bot"),
        TOKEN_B: Grant(tenant=b, user_id="alice", agent_id="bot"),
        TOKEN_TENANT_A: Grant(tenant=a),
    }


def scope_of(grant: Grant) -> Scope:
    """Return the scope a user-bound grant serves."""
    return grant.scope({})


@contextlib.contextmanager
def http_api(stack: Stack, grants: dict[str, Grant], tmp_path: Path) -> Iterator[str]:
    """Run `memoryd http` with a token file of ``grants``; yield its base URL."""
    tokens_file = tmp_path / "http-tokens.json"
    tokens_file.write_text(
        json.dumps({token: grant.model_dump(exclude_none=True) for token, grant in grants.items()})
    )
    port = free_port()
    log = tmp_path / "http.log"
    env = {
        **os.environ,
        "MEMORYD_NATS_URL": stack.nats_url,
        "MEMORYD_HTTP_TOKENS_FILE": str(tokens_file),
        "MEMORYD_LOG_FORMAT": "json",
    }
    command = [sys.executable, "-m", "memoryd.services.cli", "http", "--port", str(port)]
    with log.open("ab") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not _port_open("127.0.0.1", port):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)
    assert TOKEN_A not in log.read_text()  # no token ever reaches the log


@contextlib.asynccontextmanager
async def api(url: str, token: str | None) -> AsyncIterator[httpx.AsyncClient]:
    """Yield an httpx client of the API at ``url`` sending ``token`` (None: no token)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
        yield http


def ok(response: httpx.Response, status: int = 200) -> Any:
    """Return a successful response's JSON."""
    assert status == response.status_code, response.text
    return response.json()


async def settled(stack: Stack, scope: Scope) -> None:
    """Wait until the workers have applied everything of the user's so far."""
    async with await MemoryClient.connect(stack.nats_url) as client:
        await client.wait_until_applied(scope=scope)


# One backend is enough: the interface is under test, not the database.
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_every_route_works_in_the_tokens_scope(
    stack: Stack, grants: dict[str, Grant], tmp_path: Path
) -> None:
    """Remember, record, recall within the budget, list and page, history, forget by key and
    by id, the health check and the OpenAPI document, over real HTTP."""
    alice = scope_of(grants[TOKEN_A])
    with http_api(stack, grants, tmp_path) as url:
        async with api(url, TOKEN_A) as http:
            health = ok(await http.get("/healthz"))
            openapi = ok(await http.get("/openapi.json"))
            diet = {"content": "Alice is vegetarian", "key": "diet", "importance": 0.9}
            stored = ok(await http.post("/v1/memories", json=diet), 202)
            other = ok(await http.post("/v1/memories", json={"content": "Alice likes jazz"}), 202)
            turn = ok(await http.post("/v1/turns", json={"query": "hi", "response": "hello"}), 202)
            await settled(stack, alice)
            recall = {"query": "what does Alice eat?", "max_tokens": 300}
            recalled = ok(await http.post("/v1/recall", json=recall))
            kept = ok(await http.get("/v1/memories"))
            second_page = ok(await http.get("/v1/memories", params={"limit": 1, "offset": 1}))
            ok(await http.delete("/v1/memories/by-key/diet"), 202)
            ok(await http.delete(f"/v1/memories/{other['memory_id']}"), 202)
            await settled(stack, alice)
            history = ok(await http.get(f"/v1/memories/{stored['memory_id']}/history"))
            by_key = ok(await http.get("/v1/memories/by-key/diet/history"))
            left = ok(await http.get("/v1/memories"))

    assert {"status": "ok"} == health
    assert {"/v1/recall", "/v1/memories", "/v1/turns", "/v1/notifications"} <= set(openapi["paths"])
    assert uuid.UUID(turn["turn_id"])
    assert "Alice is vegetarian" in recalled["context"]
    assert recalled["tokens"] <= 300
    assert stored["memory_id"] in [m["memory_id"] for m in recalled["memories"]]
    assert (2, 2) == (kept["total"], len(kept["memories"]))
    assert (2, 1) == (second_page["total"], len(second_page["memories"]))
    assert ["memory.remembered.v1", "memory.forgotten.v1"] == [
        v["type"] for v in history["versions"]
    ]
    assert history == by_key
    assert (0, []) == (left["total"], left["memories"])


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_bad_input_is_422_with_the_field_named_and_writes_nothing(
    stack: Stack, grants: dict[str, Grant], tmp_path: Path
) -> None:
    """A negative budget, an empty turn and an empty memory are refused with an error body
    naming the field; the user's log is unchanged until a good request writes."""
    alice = scope_of(grants[TOKEN_A])
    with http_api(stack, grants, tmp_path) as url:
        async with api(url, TOKEN_A) as http:
            budget = await http.post("/v1/recall", json={"query": "x", "max_tokens": -5})
            turn = await http.post("/v1/turns", json={"query": "", "response": " "})
            empty = await http.post("/v1/memories", json={"content": ""})
            smuggled = await http.post("/v1/memories", json={"content": "x", "user_id": "bob"})
            before = await user_messages(
                stack.nats_url, stack.settings.stream_name, alice.tenant, alice.user_id
            )
            ok(await http.post("/v1/turns", json={"query": "hi", "response": "hello"}), 202)

    assert [422] * 4 == [r.status_code for r in (budget, turn, empty, smuggled)]
    assert {"invalid_request"} == {r.json()["code"] for r in (budget, turn, empty, smuggled)}
    assert budget.json()["message"].startswith("max_tokens: Input should be greater than")
    assert "a turn needs a query or a response" in turn.json()["message"]
    assert empty.json()["message"].startswith("content: String should have at least 1 character")
    assert smuggled.json()["message"].startswith("user_id: Extra inputs are not permitted")
    assert 0 == before
    assert 0 < await user_messages(
        stack.nats_url, stack.settings.stream_name, alice.tenant, alice.user_id
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_a_token_never_reaches_another_tenant_or_user(
    stack: Stack, grants: dict[str, Grant], tmp_path: Path
) -> None:
    """B's memory is invisible to A's tokens (recall, list, history), and naming another
    tenant, another user or the whole tenant with a user token is refused with 403."""
    with http_api(stack, grants, tmp_path) as url:
        async with api(url, TOKEN_B) as b:
            code = {"content": "B's launch code is 0000", "key": "code"}
            theirs = ok(await b.post("/v1/memories", json=code), 202)
        async with api(url, TOKEN_A) as a, api(url, TOKEN_TENANT_A) as app:
            ok(await a.post("/v1/memories", json={"content": "A's launch is on Monday"}), 202)
            await settled(stack, scope_of(grants[TOKEN_A]))
            await settled(stack, scope_of(grants[TOKEN_B]))
            recalled = ok(await a.post("/v1/recall", json={"query": "launch code"}))
            kept = ok(await a.get("/v1/memories", params={"search_scope": "user"}))
            by_id = ok(await a.get(f"/v1/memories/{theirs['memory_id']}/history"))
            whole = ok(
                await app.get("/v1/memories", params={"user_id": "alice", "agent_id": "bot"})
            )
            everyone = ok(await app.post("/v1/recall?user_id=x", json={"search_scope": "global"}))
            refused = [
                await a.get("/v1/memories", params={"user_id": "bob"}),
                await a.get("/v1/memories", params={"tenant": grants[TOKEN_B].tenant}),
                await app.get("/v1/memories", params={"tenant": grants[TOKEN_B].tenant}),
                await a.post("/v1/recall", json={"query": "code", "search_scope": "global"}),
            ]
            nameless = await app.get("/v1/memories")

    assert "Monday" in recalled["context"]
    assert "0000" not in json.dumps(recalled)
    assert ["A's launch is on Monday"] == [m["content"] for m in kept["memories"]]
    assert [] == by_id["versions"]
    assert ["A's launch is on Monday"] == [m["content"] for m in whole["memories"]]
    assert "0000" not in json.dumps(everyone)
    assert [403] * 4 == [r.status_code for r in refused]
    assert {"forbidden"} == {r.json()["code"] for r in refused}
    assert "user_id: this token is bound to another user_id" == refused[0].json()["message"]
    assert (422, "invalid_request") == (nameless.status_code, nameless.json()["code"])


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_a_missing_or_unknown_token_is_401(
    stack: Stack, grants: dict[str, Grant], tmp_path: Path
) -> None:
    """No token or a wrong one is answered 401 with a bearer challenge, and nothing is read."""
    with http_api(stack, grants, tmp_path) as url:
        async with api(url, None) as anonymous, api(url, "guessed-token-000000") as guessing:
            missing = await anonymous.post("/v1/recall", json={"query": "x"})
            wrong = await guessing.get("/v1/memories")
            stream = await guessing.get("/v1/notifications")

    assert [401] * 3 == [r.status_code for r in (missing, wrong, stream)]
    assert {"code": "unauthorized", "message": "unknown bearer token"} == wrong.json()
    assert "a bearer token is required" == missing.json()["message"]
    assert missing.headers["www-authenticate"].startswith("Bearer ")


# --- server-sent events ----------------------------------------------------------------------
async def events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Yield the events of a text/event-stream response: id, event and parsed data."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line.startswith(":"):
            continue
        if line:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
            continue
        if "data" in fields:
            yield {"id": int(fields["id"]), "event": fields["event"], **json.loads(fields["data"])}
        fields = {}


async def read_until(response: httpx.Response, event_id: str) -> list[dict[str, Any]]:
    """Return the events read up to the first one caused by the event ``event_id``."""
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(EVENT_WAIT_SECONDS):
        async for event in events(response):
            seen.append(event)
            if event["event_id"] == event_id:
                return seen
    raise AssertionError(f"the stream ended before {event_id}: {seen}")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_notifications_stream_as_events_and_resume_after_last_event_id(
    stack: Stack, grants: dict[str, Grant], tmp_path: Path
) -> None:
    """A subscriber receives the notification of a turn it records as an event; reconnecting
    with Last-Event-ID delivers what was published while away, and nothing it saw."""
    alice = scope_of(grants[TOKEN_A])
    with http_api(stack, grants, tmp_path) as url:
        async with api(url, TOKEN_A) as http:
            async with http.stream("GET", "/v1/notifications") as live:
                first = ok(await http.post("/v1/turns", json={"query": "a", "response": "b"}), 202)
                seen = await read_until(live, first["turn_id"])
            second = ok(await http.post("/v1/turns", json={"query": "c", "response": "d"}), 202)
            await settled(stack, alice)
            resume = {"Last-Event-ID": str(seen[-1]["id"])}
            async with http.stream("GET", "/v1/notifications", headers=resume) as resumed:
                after = await read_until(resumed, second["turn_id"])

    assert "text/event-stream" in live.headers["content-type"]
    assert {"alice"} == {event["user_id"] for event in seen + after}
    assert all(event["kind"] == event["event"] for event in seen + after)
    assert all(event["id"] > seen[-1]["id"] for event in after)
    assert set() == {e["id"] for e in seen} & {e["id"] for e in after}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_without_a_recall_service_reads_are_503_unavailable(
    make_stack: StackFactory, grants: dict[str, Grant], tmp_path: Path
) -> None:
    """With no recall service running, recall and list answer 503 `unavailable` at once."""
    stack = await make_stack([c for c in ALL_COMPONENTS if c != "recall"])
    with http_api(stack, grants, tmp_path) as url:
        async with api(url, TOKEN_A) as http:
            recalled = await http.post("/v1/recall", json={"query": "diet"})
            listed = await http.get("/v1/memories")

    assert [503, 503] == [recalled.status_code, listed.status_code]
    assert {"unavailable"} == {recalled.json()["code"], listed.json()["code"]}
