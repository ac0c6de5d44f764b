"""The list-memories handler over the memories read model on SQLite (no broker, no model)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import TypeAdapter
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.memories.projection import MemoriesProjection
from memoryd.services.recall.listing import MemoryListing
from memoryd.services.runtime.projection import Positioned, apply_once
from memoryd.shared import subjects
from memoryd.shared.adapters.sql.engine import create_engine, session_factory
from memoryd.shared.adapters.sql.schema import create_schema
from memoryd.shared.contracts import (
    Category,
    ListMemoriesError,
    ListMemoriesRequest,
    MemoryList,
    MemoryRemembered,
    Scope,
)
from memoryd.shared.contracts.memories import ListMemoriesReply

T0 = datetime.now(UTC) - timedelta(hours=1)  # a daily memory is live for 30 days
ALICE = Scope(tenant="acme", user_id="alice")
BOB = Scope(tenant="acme", user_id="bob")
EVE = Scope(tenant="evil", user_id="alice")
replies: TypeAdapter[ListMemoriesReply] = TypeAdapter(ListMemoriesReply)


@pytest.fixture
async def sessions(tmp_path: Path) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'memoryd.db'}")
    await create_schema(engine)
    events = [
        remembered(ALICE, 0, "diet", "vegetarian"),
        remembered(ALICE, 1, "city", "Lisbon", Category.DAILY),
        remembered(ALICE, 2, "seat", "window", Category.CONVERSATION),
        remembered(BOB, 3, "diet", "carnivore"),
        remembered(EVE, 4, "diet", "the other tenant's secret"),
    ]
    batch = [Positioned(event, seq) for seq, event in enumerate(events, start=1)]
    await apply_once(session_factory(engine), MemoriesProjection(30), batch, None)  # type: ignore[arg-type]
    yield session_factory(engine, writer=False)
    await engine.dispose()


def remembered(
    scope: Scope, minutes: int, key: str, content: str, category: Category = Category.CORE
) -> MemoryRemembered:
    return MemoryRemembered(
        occurred_at=T0 + timedelta(minutes=minutes),
        scope=scope,
        key=key,
        content=content,
        category=category,
    )


async def ask(
    sessions: async_sessionmaker[AsyncSession], request: ListMemoriesRequest, tenant: str
) -> MemoryList | ListMemoriesError:
    """Send ``request`` to the handler as if received on ``tenant``'s subject."""
    body = request.model_dump_json().encode()
    reply = await MemoryListing(sessions).handle(subjects.list_memories_subject(tenant), body)
    return replies.validate_json(reply)


async def test_lists_the_users_memories_newest_change_first(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Alice's three memories come newest first; Bob's and the other tenant's do not."""
    answer = await ask(sessions, ListMemoriesRequest(scope=ALICE), "acme")

    assert isinstance(answer, MemoryList)
    assert ["seat", "city", "diet"] == [memory.key for memory in answer.memories]
    assert 3 == answer.total
    assert T0 + timedelta(minutes=2) == answer.memories[0].updated_at  # in UTC, on SQLite too


async def test_pages_and_filters_by_category(sessions: async_sessionmaker[AsyncSession]) -> None:
    """``limit`` and ``offset`` page through the list; ``total`` counts every match."""
    request = ListMemoriesRequest(
        scope=ALICE, categories=(Category.CORE, Category.DAILY), limit=1, offset=1
    )

    answer = await ask(sessions, request, "acme")

    assert isinstance(answer, MemoryList)
    assert ["diet"] == [memory.key for memory in answer.memories]
    assert 2 == answer.total


async def test_a_scope_naming_another_tenant_than_the_subject_is_refused(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A caller on acme's subject asking for the evil tenant's scope gets ``forbidden``."""
    answer = await ask(sessions, ListMemoriesRequest(scope=EVE), "acme")

    assert isinstance(answer, ListMemoriesError)
    assert "forbidden" == answer.code


async def test_a_malformed_request_gets_a_clear_error(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A request whose limit is out of range is answered ``invalid_request`` naming the field."""
    body = b'{"scope": {"tenant": "acme", "user_id": "alice"}, "limit": 0}'

    reply = replies.validate_json(
        await MemoryListing(sessions).handle(subjects.list_memories_subject("acme"), body)
    )

    assert isinstance(reply, ListMemoriesError)
    assert "invalid_request" == reply.code
    assert reply.message.startswith("limit:")
