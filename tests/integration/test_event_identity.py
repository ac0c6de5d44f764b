"""What a publisher that is not the Python SDK sends: raw JSON on a real nats-server.

Every event on the log carries one identity (``event_id``) that every projection uses, and text
that both databases can store; an event that breaks either rule is dead-lettered at decoding,
by every projection, alike on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from sqlalchemy import select

from memoryd.services.bootstrap import Stack
from memoryd.shared import subjects
from memoryd.shared.adapters.dead_letters import read_dead_letters
from memoryd.shared.adapters.index import ScopeFilter
from memoryd.shared.adapters.sql.tables import graph_items, memories, stm_chain, stm_pages
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope
from tests.conftest import consumers_reading, unique

pytestmark = [pytest.mark.integration, pytest.mark.model]

AT = "2026-01-05T09:00:00+00:00"


def fresh_scope() -> Scope:
    return Scope(tenant=unique("t"), user_id=unique("u"), session_id="s1")


async def publish_raw(
    stack: Stack, scope: Scope, body: dict[str, Any], msg_id: str | None = None
) -> None:
    """Publish JSON as a non-Python client would: bytes under the event's subject."""
    subject = subjects.event_subject(scope, body["type"])
    headers = {"Nats-Msg-Id": msg_id} if msg_id else None
    await stack.js.publish(
        subject, json.dumps(body).encode(), stream=stack.settings.stream_name, headers=headers
    )


def raw_turn(scope: Scope, query: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "turn.recorded.v1",
        "occurred_at": AT,
        "scope": scope.model_dump(mode="json"),
        "query": query,
        "response": "Noted.",
        **extra,
    }


def raw_memory(scope: Scope, content: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "memory.remembered.v1",
        "event_id": str(uuid.uuid4()),
        "occurred_at": AT,
        "scope": scope.model_dump(mode="json"),
        "memory_id": str(uuid.uuid4()),
        "key": "note",
        "content": content,
        **extra,
    }


async def indexed_points(stack: Stack, scope: Scope) -> int:
    assert stack.retrieval is not None
    return await stack.retrieval.index.count(
        ScopeFilter(tenant=scope.tenant, user_id=scope.user_id)
    )


async def test_an_event_without_event_id_is_dead_lettered_and_applied_nowhere(
    stack: Stack, client: MemoryClient
) -> None:
    """A raw turn without event_id is parked by every projection reading turns, with a reason;
    none applies it."""
    scope = fresh_scope()
    body = raw_turn(scope, "I moved to Lisbon")
    await publish_raw(stack, scope, body)
    await client.wait_until_applied(timeout=60)

    letters = await read_dead_letters(stack.js, stack.settings.dead_letter_stream)
    answer = await client.recall(scope, "Lisbon")
    async with stack.sessions() as session:
        pages = (
            await session.execute(
                select(stm_pages.c.turn_id).where(stm_pages.c.user_id == scope.user_id)
            )
        ).all()

    parked = {letter.consumer for letter in letters if scope.user_id in letter.original_subject}
    assert set(consumers_reading(stack, subjects.event_subject(scope, body["type"]))) == parked
    assert all(
        "event_id" in letter.reason
        for letter in letters
        if scope.user_id in letter.original_subject
    )
    assert [] == pages
    assert 0 == await indexed_points(stack, scope)
    assert [] == answer.pages and [] == answer.items


async def test_a_raw_event_with_event_id_has_that_identity_in_every_projection(
    stack: Stack, client: MemoryClient
) -> None:
    """STM, the chain, the index and the graph all know a raw turn by the event_id it carried."""
    scope = fresh_scope()
    turn_id = uuid.uuid4()
    body = raw_turn(scope, "I moved to Lisbon last spring", event_id=str(turn_id))
    await publish_raw(stack, scope, body, msg_id=str(turn_id))
    await client.wait_until_applied(timeout=60)

    answer = await client.recall(scope, "Lisbon")
    async with stack.sessions() as session:
        page_ids = (
            await session.scalars(
                select(stm_pages.c.turn_id).where(stm_pages.c.user_id == scope.user_id)
            )
        ).all()
        chain_ids = (
            await session.scalars(
                select(stm_chain.c.turn_id).where(stm_chain.c.user_id == scope.user_id)
            )
        ).all()
        graph_sources = (
            await session.scalars(
                select(graph_items.c.source_event_id).where(graph_items.c.user_id == scope.user_id)
            )
        ).all()

    assert [turn_id] == list(page_ids)
    assert [turn_id] == list(chain_ids)
    assert [turn_id] == list(graph_sources)
    assert {str(turn_id)} == {item.turn_id for item in answer.items}
    assert [turn_id] == [page.turn_id for page in answer.pages]


@pytest.mark.parametrize(
    "body_of",
    [
        pytest.param(lambda s: raw_memory(s, "nul \u0000 in the content"), id="content"),
        pytest.param(lambda s: raw_memory(s, "fine", key="k\u0000ey"), id="key"),
        pytest.param(
            lambda s: raw_memory(s, "fine", metadata={"source": "a\u0000b"}), id="metadata-value"
        ),
        pytest.param(
            lambda s: raw_memory(s, "fine", metadata={"so\u0000urce": "ab"}), id="metadata-key"
        ),
        pytest.param(
            lambda s: raw_memory(s, "fine", metadata={"tags": [{"deep": "x\u0000"}]}),
            id="metadata-nested",
        ),
        pytest.param(
            lambda s: raw_turn(s, "nul \u0000 in a turn", event_id=str(uuid.uuid4())), id="turn"
        ),
    ],
)
async def test_a_nul_character_is_rejected_at_the_contract_on_both_databases(
    stack: Stack, client: MemoryClient, body_of: Any
) -> None:
    """NUL in any text field is dead-lettered once per projection at decoding, nothing stored."""
    scope = fresh_scope()
    body = body_of(scope)
    await publish_raw(stack, scope, body)
    await client.wait_until_applied(timeout=60)

    letters = [
        letter
        for letter in await read_dead_letters(stack.js, stack.settings.dead_letter_stream)
        if scope.user_id in letter.original_subject
    ]
    async with stack.sessions() as session:
        rows = (
            await session.execute(
                select(memories.c.memory_id).where(memories.c.user_id == scope.user_id)
            )
        ).all()
        pages = (
            await session.execute(
                select(stm_pages.c.turn_id).where(stm_pages.c.user_id == scope.user_id)
            )
        ).all()

    readers = consumers_reading(stack, subjects.event_subject(scope, body["type"]))
    assert readers == sorted(letter.consumer for letter in letters)
    assert all("NUL" in letter.reason for letter in letters), letters[0].reason
    assert [] == rows and [] == pages
    assert 0 == await indexed_points(stack, scope)
