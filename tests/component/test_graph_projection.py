"""Component tests of the graph projection on a real SQLite file (no broker).

Each test builds the projection, applies positioned events inside a session as the runner
would, and reads the graph tables back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Table, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from memoryd.services.graph.extraction import decide
from memoryd.services.graph.projection import GraphProjection
from memoryd.services.runtime.decisions import MemoryDecisionLog, NoDecisions
from memoryd.services.runtime.projection import Positioned, apply_once
from memoryd.shared.adapters.index import ScopeFilter
from memoryd.shared.adapters.llm import OfflineExtractor
from memoryd.shared.adapters.sql.engine import create_engine, session_factory
from memoryd.shared.adapters.sql.schema import create_schema, read_model_checksums
from memoryd.shared.adapters.sql.tables import graph_edges, graph_items, graph_mentions
from memoryd.shared.contracts.events import (
    Category,
    Event,
    MemoryForgotten,
    MemoryRemembered,
    SessionEnded,
    TurnRecorded,
)
from memoryd.shared.contracts.retrieval import GraphExtracted
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.stores.graph import graph_search, scope_graph

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)
DAY = timedelta(days=1)
SCOPE = Scope(tenant="acme", user_id="alice", session_id="s1")


async def database(folder: Path, name: str) -> tuple[AsyncEngine, async_sessionmaker[AsyncSession]]:
    """Return a fresh SQLite file's engine (schema created) and its sessions."""
    engine = create_engine(f"sqlite+aiosqlite:///{folder / name}")
    await create_schema(engine)
    return engine, session_factory(engine)


@pytest.fixture
async def sessions(tmp_path: Path) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """Yield the sessions of a fresh SQLite read-model database."""
    engine, factory = await database(tmp_path, "graph.db")
    yield factory
    await engine.dispose()


def turn(query: str, day: int) -> TurnRecorded:
    """Return a turn in which the user says ``query`` on day ``day``."""
    return TurnRecorded(occurred_at=T0 + day * DAY, scope=SCOPE, query=query, response="")


def remember(content: str, day: int, key: str = "home") -> MemoryRemembered:
    """Return a remember of ``content`` under ``key`` on day ``day``."""
    return MemoryRemembered(occurred_at=T0 + day * DAY, scope=SCOPE, key=key, content=content)


def positioned(events: Sequence[Event], first: int = 1) -> list[Positioned]:
    """Number events as consecutive stream sequences from ``first``."""
    return [Positioned(e, first + n) for n, e in enumerate(events)]  # type: ignore[arg-type]


async def apply(
    sessions: async_sessionmaker[AsyncSession],
    projection: GraphProjection,
    batch: Sequence[Positioned],
    live: bool = True,
) -> None:
    """Apply one batch in one transaction, as the runner does."""
    async with sessions() as session, session.begin():
        await projection.apply(session, batch, live)


async def edges(sessions: async_sessionmaker[AsyncSession]) -> dict[str, datetime | None]:
    """Return each edge of the user's home relation as target -> invalid_at (UTC)."""
    async with sessions() as session:
        rows = await session.execute(
            select(graph_edges.c.target_key, graph_edges.c.invalid_at).where(
                graph_edges.c.relation == "lives_in"
            )
        )
        return {
            row.target_key: row.invalid_at and row.invalid_at.replace(tzinfo=UTC) for row in rows
        }


async def count(sessions: async_sessionmaker[AsyncSession], table: Table) -> int:
    """Return how many rows ``table`` holds."""
    async with sessions() as session:
        return len((await session.execute(select(table))).all())


def live_projection(decisions: MemoryDecisionLog) -> GraphProjection:
    """Return a graph projection that decides with the offline extractor."""
    return GraphProjection(OfflineExtractor(), decisions)


async def test_a_turn_is_stored_and_its_graph_folded_in_the_same_transaction(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Live, the turn's item, mentions and edge are there at once; the extraction is recorded."""
    decisions = MemoryDecisionLog()
    await apply(sessions, live_projection(decisions), positioned([turn("I live in Lisbon.", 0)]))

    recorded = list(decisions.events.values())
    assert {"lisbon": None} == await edges(sessions)
    assert (1, 2) == (await count(sessions, graph_items), await count(sessions, graph_mentions))
    assert [GraphExtracted] == [type(e) for e in recorded]


async def test_a_newer_home_ends_the_older_edge_and_deletes_nothing(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Moving to Berlin sets Lisbon's invalid_at to when Berlin was said; both edges stay."""
    decisions = MemoryDecisionLog()
    said = [turn("I live in Lisbon.", 0), turn("I live in Berlin.", 3)]
    await apply(sessions, live_projection(decisions), positioned(said))

    assert {"lisbon": T0 + 3 * DAY, "berlin": None} == await edges(sessions)


async def test_the_extraction_coming_back_live_is_skipped(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The worker's own GraphExtracted, delivered back to it live, changes nothing."""
    decisions = MemoryDecisionLog()
    projection = live_projection(decisions)
    await apply(sessions, projection, positioned([turn("I live in Lisbon.", 0)]))
    engine = sessions.kw["bind"]
    before = await read_model_checksums(engine, projection.tables)

    await apply(sessions, projection, positioned(list(decisions.events.values()), first=2))

    assert before == await read_model_checksums(engine, projection.tables)


async def test_a_redelivered_trigger_folds_the_extraction_the_log_kept(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """When the log already holds an extraction for the turn, that copy is folded, not a new one."""
    said = turn("I live in Lisbon.", 0)
    # The first worker recorded another answer (an LLM) and died before its commit.
    kept = GraphExtracted.model_validate(
        {
            **(await decide(OfflineExtractor(), MemoryDecisionLog(), said)).model_dump(),
            "relations": [{"source": "user", "relation": "lives_in", "target": "Porto"}],
        }
    )
    decisions = MemoryDecisionLog()
    await decisions.record(kept)

    await apply(sessions, live_projection(decisions), positioned([said]))

    assert {"porto": None} == await edges(sessions)


async def test_forget_removes_the_items_mentions_and_edges(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A forgotten memory leaves no item, mention or edge behind."""
    projection = live_projection(MemoryDecisionLog())
    home = remember("I live in Lisbon.", 0)
    forget = MemoryForgotten(occurred_at=T0 + DAY, scope=SCOPE, key="home")
    await apply(sessions, projection, positioned([home, forget]))

    assert (0, 0, {}) == (
        await count(sessions, graph_items),
        await count(sessions, graph_mentions),
        await edges(sessions),
    )


async def replayed_equals_live(folder: Path, triggers: Sequence[Event]) -> tuple[object, object]:
    """Apply ``triggers`` live, then replay the whole log (triggers, then the recorded
    decisions, as a lagging worker leaves them) one event per transaction with no decision
    possible; return the graph tables' checksums of both databases."""
    decisions = MemoryDecisionLog()
    live_engine, live_sessions = await database(folder, "live.db")
    replay_engine, replay_sessions = await database(folder, "replay.db")
    live = live_projection(decisions)
    for item in positioned(triggers):
        await apply(live_sessions, live, [item])
    log = positioned([*triggers, *decisions.events.values()])
    replay = GraphProjection(NoDecisions(), NoDecisions())
    for item in log:
        await apply_once(replay_sessions, replay, [item], None)
    try:
        return (
            await read_model_checksums(live_engine, live.tables),
            await read_model_checksums(replay_engine, replay.tables),
        )
    finally:
        await live_engine.dispose()
        await replay_engine.dispose()


async def test_replay_folds_the_recorded_extractions_into_the_same_graph(tmp_path: Path) -> None:
    """Replay decides nothing (its ports raise) and rebuilds the live tables exactly."""
    said = [turn("I live in Lisbon.", 0), turn("I live in Berlin.", 3), turn("I drive a Volvo.", 4)]
    live, replayed = await replayed_equals_live(tmp_path, said)
    assert live == replayed


async def test_a_memory_rewritten_before_its_extraction_reaches_the_log_replays_as_live(
    tmp_path: Path,
) -> None:
    """Lisbon, said and replaced by Berlin before its extraction was logged, still ended Paris
    on the day it was said, in replay as live."""
    said = [
        turn("I live in Paris.", 0),
        remember("I live in Lisbon.", 2),
        remember("I live in Berlin.", 5),
    ]
    live, replayed = await replayed_equals_live(tmp_path, said)
    assert live == replayed


def mixed_day() -> list[Event]:
    """Return turns and memories that rewrite, contradict and forget one another."""
    chat = Scope(tenant="acme", user_id="alice", session_id="s2")
    return [
        turn("I live in Paris.", 0),
        remember("I live in Lisbon.", 2),
        turn("I drive a Volvo.", 3),
        remember("I live in Berlin.", 5),
        turn("I live in Rome.", 6),
        MemoryForgotten(occurred_at=T0 + 7 * DAY, scope=SCOPE, key="home"),
        MemoryRemembered(
            occurred_at=T0 + 8 * DAY,
            scope=chat,
            key="mood",
            content="I work with Maria in Madrid.",
            category=Category.CONVERSATION,
        ),
        turn("I live in Oslo.", 9),
        SessionEnded(occurred_at=T0 + 10 * DAY, scope=chat),
    ]


async def checksums_of(
    folder: Path,
    name: str,
    projection: GraphProjection,
    batches: Sequence[Sequence[Positioned]],
    live: bool,
) -> dict[str, str]:
    """Apply ``batches`` (one transaction each) to a fresh database; return its checksums.

    Live, as the worker applies them; replayed, as ``apply_once`` does (with the ledger that
    tells a later batch where a trigger was applied).
    """
    engine, sessions = await database(folder, name)
    try:
        for batch in batches:
            if live:
                await apply(sessions, projection, batch)
            else:
                await apply_once(sessions, projection, batch, None)
        return await read_model_checksums(engine, projection.tables)
    finally:
        await engine.dispose()


@pytest.mark.parametrize("live", [True, False], ids=["live", "replay"])
async def test_one_batch_leaves_the_graph_that_one_event_per_transaction_leaves(
    tmp_path: Path, live: bool
) -> None:
    """Rewrites, contradictions, a forget and a session end inside one batch fold as they do
    one transaction at a time (the batch reads once and writes at the end)."""
    decisions = MemoryDecisionLog()
    triggers = mixed_day()
    for event in triggers:
        if isinstance(event, TurnRecorded | MemoryRemembered):
            await decide(OfflineExtractor(), decisions, event)
    log = positioned(triggers if live else [*triggers, *decisions.events.values()])

    def projection() -> GraphProjection:
        if live:
            return live_projection(decisions)
        return GraphProjection(NoDecisions(), NoDecisions())

    singles = [[item] for item in log]
    one_by_one = await checksums_of(tmp_path, "single.db", projection(), singles, live)
    batches = [log[:2], log[2:]]  # the second batch reads what the first one wrote
    batched = await checksums_of(tmp_path, "batch.db", projection(), batches, live)

    assert one_by_one == batched


async def test_graph_search_finds_only_the_owners_items_inside_the_filters(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Two users and two sessions say the same name: a search returns its owner's, in scope."""
    bob = Scope(tenant="acme", user_id="bob", session_id="s1")
    other_tenant = Scope(tenant="globex", user_id="alice", session_id="s1")
    later = Scope(tenant="acme", user_id="alice", session_id="s2")
    said = [
        turn("I visited Porto with Marta.", 0),
        TurnRecorded(occurred_at=T0, scope=later, query="Marta loves Porto.", response=""),
        TurnRecorded(occurred_at=T0, scope=bob, query="Marta lives in Porto.", response=""),
        TurnRecorded(occurred_at=T0, scope=other_tenant, query="Marta and Porto.", response=""),
        # Alice says other names too, so Marta is no hub of hers (a hub counts nothing).
        *(turn(f"I met {name} today.", 1) for name in ("Ivo", "Rui", "Ana", "Eva", "Teo")),
    ]
    await apply(sessions, live_projection(MemoryDecisionLog()), positioned(said))
    alice = ScopeFilter(tenant="acme", user_id="alice")

    async with sessions() as session:
        owned = await graph_search(session, "Where did Marta go?", alice, 10)
        in_s2 = await graph_search(
            session, "Where did Marta go?", alice.model_copy(update={"session_id": "s2"}), 10
        )
        graph = await scope_graph(session, alice)

    assert {"s1", "s2"} == {hit.row["session_id"] for hit in owned}
    assert {("acme", "alice")} == {(hit.row["tenant"], hit.row["user_id"]) for hit in owned}
    assert ["s2"] == [hit.row["session_id"] for hit in in_s2]
    assert 2 == graph.counts["marta"]
    assert 7 == graph.total  # alice's items, each counted once (not the other scopes')
