"""Each projection folds events into its store on a real SQLite file (no broker, no model).

Events go through `apply_once` in replay mode (no publisher: no decision is made, the recorded
decisions are folded), so the ledger and tracking rows are exercised too.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.memories.projection import MemoriesProjection
from memoryd.services.mtm.projection import MtmProjection
from memoryd.services.persona.projection import PersonaProjection
from memoryd.services.runtime.decisions import NoDecisions
from memoryd.services.runtime.projection import Positioned, Projection, apply_once
from memoryd.services.stm.chain import ChainProjection
from memoryd.services.stm.projection import StmProjection
from memoryd.shared.contracts import MemoryForgotten, MemoryRemembered, Scope, TurnRecorded
from memoryd.shared.contracts.events import Event
from memoryd.shared.contracts.memoryos import LearnedFact, PageChained, PageFiled, PersonaExtracted
from memoryd.shared.contracts.scope import SearchScope
from memoryd.shared.domain.memoryos import DEFAULT_PARAMS, encode_vector, unit_vector
from memoryd.shared.domain.stm import ConversationKey
from memoryd.shared.stores import chain, memories, mtm, persona, stm

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SCOPE = Scope(tenant="acme", user_id="alice", session_id="s1")
KEY = ConversationKey("acme", "alice", "default")


async def fold(
    sessions: async_sessionmaker[AsyncSession], projection: Projection, events: Sequence[Event]
) -> None:
    """Apply ``events`` as the log's sequences 1..n, in replay mode."""
    batch = [Positioned(event, seq) for seq, event in enumerate(events, start=1)]  # type: ignore[arg-type]
    await apply_once(sessions, projection, batch, None)


def turn(i: int) -> TurnRecorded:
    return TurnRecorded(
        occurred_at=T0 + timedelta(minutes=i), scope=SCOPE, query=f"q{i}", response=f"r{i}"
    )


def vector(seed: int) -> str:
    values = np.random.default_rng(seed).normal(size=384).astype(np.float32)
    return encode_vector(unit_vector(values))


async def test_stm_keeps_the_newest_pages_of_a_conversation(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Nine turns into a FIFO of seven leave the last seven, oldest first."""
    await fold(sessions, StmProjection(7), [turn(i) for i in range(9)])

    async with sessions() as session:
        pages = await stm.conversation_pages(session, SCOPE, SearchScope.AGENT)

    assert [f"q{i}" for i in range(2, 9)] == [page.query for page in pages]


async def test_memories_replace_by_key_and_forget_by_key(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A key remembered twice is one memory; forgetting the key removes it."""
    events = [
        MemoryRemembered(occurred_at=T0, scope=SCOPE, key="diet", content="vegetarian"),
        MemoryRemembered(occurred_at=T0, scope=SCOPE, key="diet", content="vegan"),
        MemoryRemembered(occurred_at=T0, scope=SCOPE, key="city", content="Lisbon"),
    ]
    await fold(sessions, MemoriesProjection(30), events)
    async with sessions() as session:
        held = await memories.visible(session, SCOPE, SearchScope.AGENT, T0)
    await fold(
        sessions,
        MemoriesProjection(30),
        [*events, MemoryForgotten(occurred_at=T0, scope=SCOPE, key="diet")],
    )
    async with sessions() as session:
        left = await memories.visible(session, SCOPE, SearchScope.AGENT, T0)

    assert ["Lisbon", "vegan"] == sorted(row["content"] for row in held)
    assert ["Lisbon"] == [row["content"] for row in left]


async def test_chain_folds_the_recorded_verdicts(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Replay folds page.chained: each page carries its recorded chain summary."""
    first, second = turn(0), turn(1)
    chained = [
        PageChained(
            occurred_at=t.occurred_at,
            scope=SCOPE,
            turn_id=t.event_id,
            linked=i == 1,
            meta_chain=f"summary {i}",
            decided_by="offline",
        )
        for i, t in enumerate((first, second))
    ]
    await fold(
        sessions, ChainProjection(NoDecisions(), NoDecisions(), 7), [first, second, *chained]
    )

    async with sessions() as session:
        rows = await chain.conversation(session, KEY)
        summaries = await chain.meta_chains(session, [first.event_id, second.event_id])

    assert [False, True] == [row["linked"] for row in rows]
    assert {first.event_id: "summary 0", second.event_id: "summary 1"} == summaries


async def test_mtm_folds_a_filed_page_into_its_segment(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Replay folds page.filed: the segment exists with the page, retrievable with its vector."""
    turn_id = uuid.uuid4()
    filed = PageFiled(
        occurred_at=T0,
        scope=SCOPE,
        cause_event_id=uuid.uuid4(),
        turn_id=turn_id,
        segment_id="seg-1",
        opened=True,
        fscore=None,
        keywords=("bread", "dough"),
        vector=vector(1),
        query="How long do I knead dough?",
        response="Ten minutes.",
        turn_occurred_at=T0,
        embedder="test",
        decided_by="offline",
    )
    projection = MtmProjection(NoDecisions(), NoDecisions(), NoDecisions(), DEFAULT_PARAMS)
    await fold(sessions, projection, [filed])

    async with sessions() as session:
        segments = await mtm.load_segments(session, "acme", "alice")
        pages = await mtm.segment_pages(session, ["seg-1"])

    assert ["seg-1"] == [segment.id for segment in segments]
    assert [turn_id] == [page["turn_id"] for page in pages]
    assert {"bread", "dough"} <= set(segments[0].keywords)


async def test_persona_folds_an_extraction_with_its_provenance(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Replay folds persona.extracted: the profile holds the fact and names its turns."""
    turn_id = uuid.uuid4()
    extracted = PersonaExtracted(
        occurred_at=T0,
        scope=SCOPE,
        cause_event_id=uuid.uuid4(),
        segment_id="seg-1",
        profile={"location": "Lisbon"},
        facts=(LearnedFact(text="The user lives in Lisbon", vector=vector(2)),),
        traits={},
        agent_traits=(),
        turn_ids=(turn_id,),
        session_ids=("s1",),
        embedder="test",
        decided_by="offline",
    )
    projection = PersonaProjection(NoDecisions(), NoDecisions(), NoDecisions(), DEFAULT_PARAMS)
    await fold(sessions, projection, [extracted])

    async with sessions() as session:
        held = await persona.load_persona(session, ("acme", "alice"))
        provenance = await persona.load_provenance(session, {str(extracted.event_id)})

    assert "Lisbon" == held.profile.attributes["location"].value
    assert ["The user lives in Lisbon"] == [fact.text for fact in held.knowledge.facts]
    assert (turn_id,) == provenance[str(extracted.event_id)].turn_ids
