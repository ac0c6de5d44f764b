"""execute_tool_call runs a model's tool call (OpenAI or Anthropic shaped) on a live memoryd."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memoryd.services.bootstrap import Stack
from memoryd.shared.client import MemoryClient
from memoryd.shared.client.tools import ToolCallError, execute_tool_call
from memoryd.shared.contracts import Scope
from tests.conftest import unique, user_messages

pytestmark = pytest.mark.integration


async def messages_of(stack: Stack, scope: Scope) -> int:
    """Return how many messages the log holds on the user's subjects."""
    return await user_messages(
        stack.nats_url, stack.settings.stream_name, scope.tenant, scope.user_id
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_every_tool_runs_against_the_client(stack: Stack, client: MemoryClient) -> None:
    """Arguments as OpenAI sends them (a JSON string) and as Anthropic does (an object)."""
    alice = Scope(tenant=unique("t"), user_id="alice", agent_id="travel-bot")

    async def call(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
        return await execute_tool_call(client, alice, name, arguments)

    stored = await call(
        "remember", json.dumps({"content": "Alice flies from Porto", "key": "home"})
    )
    await call("record_turn", {"query": "book me a flight", "response": "from Porto?"})
    await client.wait_until_applied(scope=alice)
    recalled = await call("recall", '{"query": "where does Alice fly from?", "max_tokens": 200}')
    kept = await call("list_memories", {"categories": ["core"]})
    await call("forget", {"memory_id": stored["memory_id"]})
    history = await call("memory_history", {"key": "home"})

    assert "Alice flies from Porto" in recalled["context"]
    assert recalled["tokens"] <= 200
    assert [stored["memory_id"]] == [m["memory_id"] for m in kept["memories"]]
    assert ["remembered", "forgotten"] == [v["event"] for v in history["versions"]]
    assert "Alice flies from Porto" == history["versions"][0]["content"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_bad_input_raises_and_writes_nothing(stack: Stack, client: MemoryClient) -> None:
    """A negative budget and an empty memory are refused before anything is published."""
    alice = Scope(tenant=unique("t"), user_id="alice")

    with pytest.raises(ToolCallError, match=r"^recall: max_tokens: Input should be greater"):
        await execute_tool_call(client, alice, "recall", {"query": "x", "max_tokens": -5})
    with pytest.raises(ToolCallError, match=r"^remember: content: String should have at least"):
        await execute_tool_call(client, alice, "remember", '{"content": ""}')
    before = await messages_of(stack, alice)
    await execute_tool_call(client, alice, "remember", {"content": "Alice is vegan"})

    assert 0 == before
    assert 0 < await messages_of(stack, alice)  # the good call did write: the count sees it


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_the_bound_scope_cannot_be_crossed(stack: Stack, client: MemoryClient) -> None:
    """A call bound to tenant A finds A's memory, not B's, and naming B's tenant is refused."""
    mine = Scope(tenant=unique("a"), user_id="alice")
    theirs = Scope(tenant=unique("b"), user_id="alice")
    await client.remember(theirs, "the vault code is 4711", key="vault")
    await client.remember(mine, "the vault is in Lisbon", key="vault")
    await client.wait_until_applied()

    recalled = await execute_tool_call(client, mine, "recall", {"query": "vault code"})
    kept = await execute_tool_call(client, mine, "list_memories", {"search_scope": "user"})
    with pytest.raises(ToolCallError, match=r"^tenant, user_id: whose memory"):
        await execute_tool_call(
            client, mine, "recall", {"query": "vault", "tenant": theirs.tenant, "user_id": "alice"}
        )

    assert "Lisbon" in recalled["context"]
    assert "4711" not in json.dumps(recalled)
    assert ["the vault is in Lisbon"] == [m["content"] for m in kept["memories"]]
