"""A memory's key is its identity within a scope, whatever id a client sends with it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from memoryd.services.bootstrap import Stack
from memoryd.shared.adapters.index import ScopeFilter
from memoryd.shared.adapters.sql.tables import graph_items, memories
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import MemoryRemembered, Scope
from tests.conftest import unique

pytestmark = [pytest.mark.integration, pytest.mark.model]

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


async def test_a_key_remembered_under_two_client_ids_is_one_memory_and_forgotten_everywhere(
    stack: Stack, client: MemoryClient
) -> None:
    """Two remembers of one key with different ids replace each other; forget(key) clears all."""
    scope = Scope(tenant=unique("t"), user_id=unique("u"))
    for n, content in enumerate(["Alice eats no meat at all", "Alice is a strict vegan"]):
        await client.publish(
            MemoryRemembered(
                occurred_at=T0 + timedelta(minutes=n),
                scope=scope,
                memory_id=uuid.uuid4(),  # a client that invents its own id each time
                key="diet",
                content=content,
            )
        )
    await client.wait_until_applied(timeout=60)
    assert stack.retrieval is not None
    mine = ScopeFilter(tenant=scope.tenant, user_id=scope.user_id, kinds=("memory",))
    stored = await client.recall(scope, "What does Alice eat? meat vegan", include_pages=False)
    assert 1 == await stack.retrieval.index.count(mine)
    assert ["Alice is a strict vegan"] == [m.content for m in stored.memories]

    await client.forget(scope, key="diet")
    await client.wait_until_applied(timeout=60)

    answer = await client.recall(scope, "What does Alice eat? meat vegan", include_pages=False)
    async with stack.sessions() as session:
        rows = (
            await session.execute(
                select(memories.c.content).where(memories.c.user_id == scope.user_id)
            )
        ).all()
        graph = (
            await session.execute(
                select(graph_items.c.text).where(graph_items.c.user_id == scope.user_id)
            )
        ).all()
    assert [] == rows
    assert [] == graph
    assert 0 == await stack.retrieval.index.count(mine)
    assert [] == answer.memories and [] == answer.items
    assert "meat" not in answer.context and "vegan" not in answer.context
