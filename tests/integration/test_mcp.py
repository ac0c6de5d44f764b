"""`memoryd mcp` as a real process, driven by the `mcp` client library over stdio and HTTP.

The server runs against a running memoryd (real nats-server, real workers) and binds every
call to a scope it was configured with (stdio) or that the caller's bearer token maps to
(HTTP); a model's arguments never choose it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from memoryd.services.bootstrap import Stack
from memoryd.shared.adapters.embedded_nats import _port_open, free_port
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope
from tests.conftest import unique, user_messages

pytestmark = pytest.mark.integration

TOOL_NAMES = {"recall", "remember", "forget", "record_turn", "list_memories", "memory_history"}


def text(result: CallToolResult) -> str:
    """Return the text of a tool result's one content block."""
    (block,) = result.content
    assert "text" == block.type
    return str(block.text)  # type: ignore[union-attr]


def payload(result: CallToolResult) -> dict[str, Any]:
    """Return a successful tool result's JSON."""
    assert not result.is_error, text(result)
    found: dict[str, Any] = json.loads(text(result))
    return found


async def messages_of(stack: Stack, scope: Scope) -> int:
    """Return how many messages the log holds on the user's subjects."""
    return await user_messages(
        stack.nats_url, stack.settings.stream_name, scope.tenant, scope.user_id
    )


async def settled(stack: Stack, scope: Scope) -> None:
    """Wait until the workers have applied everything of the user's so far."""
    async with await MemoryClient.connect(stack.nats_url) as client:
        await client.wait_until_applied(scope=scope)


# --- stdio -----------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def stdio_session(stack: Stack, scope: Scope, log: Path) -> AsyncIterator[ClientSession]:
    """Spawn `memoryd mcp --transport stdio` serving ``scope``; yield an initialised session."""
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memoryd.services.cli", "mcp", "--transport", "stdio"],
        env={
            "MEMORYD_NATS_URL": stack.nats_url,
            "MEMORYD_MCP_TENANT": scope.tenant,
            "MEMORYD_MCP_USER": scope.user_id,
            "MEMORYD_MCP_AGENT": scope.agent_id,
            "MEMORYD_LOG_FORMAT": "json",
        },
    )
    with log.open("a") as errors:
        async with (
            stdio_client(server, errlog=errors) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


# One backend is enough: the interface is under test, not the database.
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_stdio_serves_every_tool_in_the_configured_scope(
    stack: Stack, tmp_path: Path
) -> None:
    """Remember, record, recall within the budget, list, history and forget over stdio."""
    alice = Scope(tenant=unique("t"), user_id="alice", agent_id="travel-bot")
    async with stdio_session(stack, alice, tmp_path / "mcp.log") as session:
        listed = await session.list_tools()
        remembered = payload(
            await session.call_tool(
                "remember", {"content": "Alice is vegetarian", "key": "diet", "importance": 0.9}
            )
        )
        payload(await session.call_tool("record_turn", {"query": "hi", "response": "hello"}))
        await settled(stack, alice)
        recalled = payload(
            await session.call_tool("recall", {"query": "what does Alice eat?", "max_tokens": 300})
        )
        kept = payload(await session.call_tool("list_memories", {}))
        payload(await session.call_tool("forget", {"key": "diet"}))
        history = payload(
            await session.call_tool("memory_history", {"memory_id": remembered["memory_id"]})
        )

    assert TOOL_NAMES == {tool.name for tool in listed.tools}
    assert "Alice is vegetarian" in recalled["context"]
    assert recalled["tokens"] <= 300
    assert [remembered["memory_id"]] == [m["memory_id"] for m in recalled["memories"]]
    assert (1, "diet") == (kept["total"], kept["memories"][0]["key"])
    assert ["remembered", "forgotten"] == [v["event"] for v in history["versions"]]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_stdio_bad_input_is_a_tool_error_and_writes_nothing(
    stack: Stack, tmp_path: Path
) -> None:
    """A negative budget and an empty memory are refused with the field named; the log is
    unchanged until a good call writes."""
    alice = Scope(tenant=unique("t"), user_id="alice")
    async with stdio_session(stack, alice, tmp_path / "mcp.log") as session:
        budget = await session.call_tool("recall", {"query": "diet", "max_tokens": -5})
        empty = await session.call_tool("remember", {"content": ""})
        before = await messages_of(stack, alice)
        payload(await session.call_tool("remember", {"content": "Alice is vegan"}))

    assert budget.is_error
    assert text(budget).startswith("recall: max_tokens: Input should be greater than")
    assert empty.is_error
    assert text(empty).startswith("remember: content: String should have at least 1 character")
    assert 0 == before
    assert 0 < await messages_of(stack, alice)  # the good call did write: the count sees it


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_stdio_never_crosses_into_another_tenant(stack: Stack, tmp_path: Path) -> None:
    """Bound to tenant A, the tools find A's memory and nothing of B's same-named user, and a
    call naming B's tenant is refused."""
    mine = Scope(tenant=unique("a"), user_id="alice")
    theirs = Scope(tenant=unique("b"), user_id="alice")
    async with await MemoryClient.connect(stack.nats_url) as client:
        await client.remember(theirs, "the zebra password is hunter2", key="password")
        await client.remember(mine, "my zebra is called Stripes", key="zebra")
        await client.wait_until_applied()
    async with stdio_session(stack, mine, tmp_path / "mcp.log") as session:
        recalled = payload(await session.call_tool("recall", {"query": "zebra password"}))
        kept = payload(await session.call_tool("list_memories", {"search_scope": "user"}))
        history = payload(await session.call_tool("memory_history", {"key": "password"}))
        crossing = await session.call_tool("recall", {"query": "password", "tenant": theirs.tenant})

    assert "Stripes" in recalled["context"]
    assert "hunter2" not in json.dumps(recalled)
    assert ["zebra"] == [m["key"] for m in kept["memories"]]
    assert [] == history["versions"]
    assert crossing.is_error
    assert text(crossing).startswith("tenant: whose memory a call reads or writes is fixed")


# --- streamable HTTP -------------------------------------------------------------------------
TOKEN_A = "token-of-tenant-a-0123456789"
TOKEN_B = "token-of-tenant-b-0123456789"


@contextlib.contextmanager
def http_server(
    stack: Stack, tokens: dict[str, Scope], tmp_path: Path
) -> Iterator[tuple[str, Path]]:
    """Run `memoryd mcp --transport http` with ``tokens``; yield its URL and log file."""
    tokens_file = tmp_path / "tokens.json"
    tokens_file.write_text(
        json.dumps({token: scope.model_dump(exclude_none=True) for token, scope in tokens.items()})
    )
    port = free_port()
    log = tmp_path / "mcp-http.log"
    env = {
        **os.environ,
        "MEMORYD_NATS_URL": stack.nats_url,
        "MEMORYD_MCP_TOKENS_FILE": str(tokens_file),
        "MEMORYD_LOG_FORMAT": "json",
    }
    command = [sys.executable, "-m", "memoryd.services.cli", "mcp", "--transport", "http"]
    with log.open("ab") as out:
        process = subprocess.Popen(
            [*command, "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while not _port_open("127.0.0.1", port):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", log
    finally:
        process.terminate()
        process.wait(10)


@contextlib.asynccontextmanager
async def http_session(url: str, token: str) -> AsyncIterator[ClientSession]:
    """Yield an initialised MCP session over streamable HTTP with ``token``."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@pytest.fixture
def tenants() -> dict[str, Scope]:
    """Return two tokens, each bound to a user named alice in a tenant of its own."""
    return {
        TOKEN_A: Scope(tenant=unique("a"), user_id="alice", agent_id="bot"),
        TOKEN_B: Scope(tenant=unique("b"), user_id="alice", agent_id="bot"),
    }


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_http_binds_each_token_to_its_own_tenant(
    stack: Stack, tenants: dict[str, Scope], tmp_path: Path
) -> None:
    """B's memory, stored through B's token, is invisible to A's token: recall, list, history."""
    with http_server(stack, tenants, tmp_path) as (url, _log):
        async with http_session(url, TOKEN_B) as b:
            stored = payload(
                await b.call_tool("remember", {"content": "B's launch code is 0000", "key": "code"})
            )
        async with http_session(url, TOKEN_A) as a:
            payload(await a.call_tool("remember", {"content": "A's launch is on Monday"}))
            await settled(stack, tenants[TOKEN_A])
            await settled(stack, tenants[TOKEN_B])
            recalled = payload(await a.call_tool("recall", {"query": "launch code"}))
            kept = payload(await a.call_tool("list_memories", {"search_scope": "user"}))
            by_id = payload(await a.call_tool("memory_history", {"memory_id": stored["memory_id"]}))
        async with http_session(url, TOKEN_B) as b:
            own = payload(await b.call_tool("memory_history", {"key": "code"}))

    assert "Monday" in recalled["context"]
    assert "0000" not in json.dumps(recalled)
    assert ["A's launch is on Monday"] == [m["content"] for m in kept["memories"]]
    assert [] == by_id["versions"]
    assert ["remembered"] == [v["event"] for v in own["versions"]]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_http_refuses_a_missing_or_unknown_token(
    stack: Stack, tenants: dict[str, Scope], tmp_path: Path
) -> None:
    """No token or a wrong one is answered 401 before any MCP message is read."""
    hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    with http_server(stack, tenants, tmp_path) as (url, _log):
        async with httpx2.AsyncClient(timeout=30) as http:
            missing = await http.post(url, json=hello, headers=accept)
            wrong = await http.post(
                url, json=hello, headers={**accept, "Authorization": "Bearer guessed-token-000000"}
            )
        with pytest.raises(ExceptionGroup) as refused:
            async with http_session(url, "guessed-token-000000"):
                pass

    assert (401, 401) == (missing.status_code, wrong.status_code)
    assert "unknown bearer token" == wrong.json()["error_description"]
    assert missing.headers["www-authenticate"].startswith("Bearer ")
    assert refused.group_contains(MCPError)  # the mcp client cannot even initialise


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_http_bad_input_is_a_tool_error_and_writes_nothing(
    stack: Stack, tenants: dict[str, Scope], tmp_path: Path
) -> None:
    """Over HTTP too, a bad call names the field, and only the good call reaches the log."""
    alice = tenants[TOKEN_A]
    with http_server(stack, tenants, tmp_path) as (url, _log):
        async with http_session(url, TOKEN_A) as a:
            budget = await a.call_tool("recall", {"query": "x", "max_tokens": -5})
            turn = await a.call_tool("record_turn", {"query": "", "response": " "})
            scoped = await a.call_tool("remember", {"content": "x", "user_id": "bob"})
            before = await messages_of(stack, alice)
            payload(await a.call_tool("record_turn", {"query": "hi", "response": "hello"}))

    assert text(budget).startswith("recall: max_tokens: Input should be greater than")
    assert "a turn needs a query or a response" in text(turn)
    assert text(scoped).startswith("user_id: whose memory a call reads or writes is fixed")
    assert all(result.is_error for result in (budget, turn, scoped))
    assert 0 == before
    assert 0 < await messages_of(stack, alice)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_http_a_session_answers_only_the_token_that_opened_it(
    stack: Stack, tenants: dict[str, Scope], tmp_path: Path
) -> None:
    """B's token cannot ride A's session id: the server answers as if it did not exist."""
    accept = {"Accept": "application/json, text/event-stream"}
    opening = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    with http_server(stack, tenants, tmp_path) as (url, _log):
        async with httpx2.AsyncClient(timeout=30) as http:
            opened = await http.post(
                url, json=opening, headers={**accept, "Authorization": f"Bearer {TOKEN_A}"}
            )
            session = {"mcp-session-id": opened.headers["mcp-session-id"]}
            as_b = await http.post(
                url,
                json=listing,
                headers={**accept, **session, "Authorization": f"Bearer {TOKEN_B}"},
            )
            as_a = await http.post(
                url,
                json=listing,
                headers={**accept, **session, "Authorization": f"Bearer {TOKEN_A}"},
            )

    assert (200, 404, 200) == (opened.status_code, as_b.status_code, as_a.status_code)
