"""The SDK's list_memories (request-reply to the query service) and memory_history (the log)."""

from __future__ import annotations

import nats
import pytest

from memoryd.services.bootstrap import Stack
from memoryd.shared import subjects
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import (
    Category,
    ListMemoriesError,
    ListMemoriesRequest,
    MemoryForgotten,
    MemoryRemembered,
    Scope,
)
from tests.conftest import unique

pytestmark = pytest.mark.integration


async def test_list_memories_reads_the_users_memories_only(
    stack: Stack, client: MemoryClient
) -> None:
    """Alice lists her two memories, newest first; another user's and tenant's stay out."""
    alice = Scope(tenant=unique("t"), user_id="alice")
    await client.remember(alice, "Alice is vegetarian", key="diet")
    await client.remember(alice, "Alice lives in Lisbon", key="city", category=Category.DAILY)
    await client.remember(alice.model_copy(update={"user_id": "bob"}), "Bob eats meat", key="diet")
    await client.remember(alice.model_copy(update={"tenant": unique("t")}), "not alice's")
    await client.wait_until_applied()

    page = await client.list_memories(alice)

    assert ["Alice lives in Lisbon", "Alice is vegetarian"] == [m.content for m in page.memories]
    assert 2 == page.total


async def test_list_memories_on_another_tenants_subject_is_forbidden(
    stack: Stack, client: MemoryClient
) -> None:
    """A request for tenant B sent on tenant A's subject is refused, and the SDK never does it."""
    victim = Scope(tenant=unique("victim"), user_id="alice")
    await client.remember(victim, "the victim's secret", key="secret")
    await client.wait_until_applied()
    request = ListMemoriesRequest(scope=victim).model_dump_json().encode()
    nc = await nats.connect(stack.nats_url)

    reply = await nc.request(subjects.list_memories_subject("attacker"), request)

    await nc.close()
    assert "forbidden" == ListMemoriesError.model_validate_json(reply.data).code


async def test_memory_history_reads_every_version_from_the_log(
    stack: Stack, client: MemoryClient
) -> None:
    """Two versions and a forget of a key come back in order, by key or by id alike."""
    alice = Scope(tenant=unique("t"), user_id="alice")
    memory_id = await client.remember(alice, "vegetarian", key="diet")
    await client.record_turn(alice, "what's for dinner?", "a salad")
    await client.remember(alice, "vegan", key="diet")
    await client.remember(alice, "Lisbon", key="city")
    await client.forget(alice, key="diet")
    await client.remember(alice.model_copy(update={"user_id": "bob"}), "meat", key="diet")

    by_key = await client.memory_history(alice, key="diet")
    by_id = await client.memory_history(alice, memory_id=memory_id)

    assert [MemoryRemembered, MemoryRemembered, MemoryForgotten] == [type(e) for e in by_key]
    assert ["vegetarian", "vegan"] == [e.content for e in by_key if isinstance(e, MemoryRemembered)]
    assert by_key == by_id
