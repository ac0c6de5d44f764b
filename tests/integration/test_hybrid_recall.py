"""Hybrid recall end to end: real nats-server, SQLite / PostgreSQL, MiniLM and Qdrant Edge."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from memoryd.services.bootstrap import ALL_COMPONENTS, Stack, build_projections
from memoryd.services.runtime.replay import replay
from memoryd.shared.adapters.sql.schema import read_model_checksums
from memoryd.shared.adapters.sql.tables import graph_edges
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope, SearchScope
from memoryd.shared.contracts.recall import RecallResponse, StreamWeights
from tests.conftest import unique

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
ONLY = {
    "bm25": StreamWeights(bm25=1, dense=0, graph=0),
    "dense": StreamWeights(bm25=0, dense=1, graph=0),
    "graph": StreamWeights(bm25=0, dense=0, graph=1),
}
WORDS = [
    "tea",
    "coffee",
    "Lisbon",
    "Berlin",
    "guitar",
    "piano",
    "marathon",
    "dentist",
    "Kyoto",
    "garden",
    "chess",
    "novel",
]


def fresh_scope(**extra: str) -> Scope:
    return Scope(tenant=unique("t"), user_id=unique("u"), **extra)


async def ask(client: MemoryClient, scope: Scope, query: str, **options: object) -> RecallResponse:
    return await client.recall(scope, query, include_pages=False, timeout=30.0, **options)


async def test_forget_removes_a_memory_from_all_three_streams(
    stack: Stack, client: MemoryClient
) -> None:
    """A memory found by BM25, dense and graph search is found by none once forgotten."""
    scope = fresh_scope()
    await client.remember(scope, "I live in Lisbon near the river.", key="home")
    await client.remember(scope, "I play the guitar on Sundays.", key="hobby")
    await client.wait_until_applied()
    query = "Do I still live in Lisbon?"
    for stream, weights in ONLY.items():
        found = await ask(client, scope, query, weights=weights)
        assert "home: I live in Lisbon near the river." == found.items[0].text, stream

    await client.forget(scope, key="home")
    await client.wait_until_applied()

    for stream, weights in ONLY.items():
        found = await ask(client, scope, query, weights=weights)
        assert all("Lisbon" not in item.text for item in found.items), stream


async def test_a_contradicted_relation_is_invalidated_and_recall_prefers_the_newer(
    stack: Stack, client: MemoryClient
) -> None:
    """'I moved to Berlin' ends the Lisbon edge (kept, invalidated); recall puts Berlin first."""
    scope = fresh_scope(session_id="s1")
    await client.record_turn(scope, "I live in Lisbon.", "Lovely city.", occurred_at=T0)
    moved = T0 + timedelta(days=40)
    await client.record_turn(scope, "I moved to Berlin.", "Exciting!", occurred_at=moved)
    await client.wait_until_applied()

    async with stack.sessions() as session:
        rows = await session.execute(
            select(graph_edges.c.target_key, graph_edges.c.invalid_at).where(
                graph_edges.c.tenant == scope.tenant, graph_edges.c.relation == "lives_in"
            )
        )
        edges = {row.target_key: row.invalid_at for row in rows}
    assert {"lisbon", "berlin"} == set(edges)
    assert edges["berlin"] is None
    assert moved == edges["lisbon"].replace(tzinfo=edges["lisbon"].tzinfo or UTC)

    graph_only = await ask(client, scope, "Where do I live?", weights=ONLY["graph"])
    assert ["I moved to Berlin.\nExciting!"] == [item.text for item in graph_only.items]
    fused = await ask(client, scope, "Where do I live?", explain=True)
    assert "I moved to Berlin.\nExciting!" == fused.items[0].text
    assert fused.items[0].explanation is not None
    assert "graph" in fused.items[0].explanation.streams


async def test_no_result_ever_crosses_scope(stack: Stack, client: MemoryClient) -> None:
    """Random tenants, users and queries: every stream only returns the caller's own items."""
    rng = random.Random(4)
    tenants = [unique("t") for _ in range(2)]
    users = ["alice", "bob", "carol"]  # the same user ids in every tenant
    scopes = [
        Scope(tenant=t, user_id=u, agent_id=rng.choice(["a1", "a2"]))
        for t in tenants
        for u in users
    ]
    for scope in scopes:
        for n in range(4):
            words = " ".join(rng.sample(WORDS, 3))
            text = f"[{scope.tenant}/{scope.user_id}/{scope.agent_id}] I like {words}."
            await client.record_turn(scope, text, "Noted.", occurred_at=T0 + timedelta(hours=n))
        await client.remember(
            scope, f"[{scope.tenant}/{scope.user_id}/{scope.agent_id}] {rng.choice(WORDS)}"
        )
    await client.wait_until_applied()

    for _ in range(12):
        scope = rng.choice(scopes)
        query = " ".join(rng.sample(WORDS, 2))
        wide = rng.choice([SearchScope.AGENT, SearchScope.USER, SearchScope.GLOBAL])
        for weights in (*ONLY.values(), StreamWeights()):
            found = await ask(client, scope, query, search_scope=wide, weights=weights, limit=50)
            for item in found.items:
                owner = item.text.split("]")[0].lstrip("[").split("/")
                assert scope.tenant == owner[0]
                if wide is not SearchScope.GLOBAL:
                    assert scope.user_id == owner[1]
                if wide is SearchScope.AGENT:
                    assert scope.agent_id == owner[2]


async def test_filters_narrow_by_kind_and_time(stack: Stack, client: MemoryClient) -> None:
    """A kind filter keeps only memories; a time window keeps only the turns inside it."""
    scope = fresh_scope()
    await client.record_turn(scope, "I went hiking in Kyoto.", "Nice!", occurred_at=T0)
    later = T0 + timedelta(days=10)
    await client.record_turn(scope, "Kyoto temples were quiet.", "Lovely.", occurred_at=later)
    await client.remember(scope, "Trip to Kyoto planned for May.")
    await client.wait_until_applied()

    memories = await ask(client, scope, "Kyoto", filters={"kinds": ["memory"]})
    assert ["memory"] == [item.kind for item in memories.items]
    window = {"occurred_after": later.isoformat(), "kinds": ["turn"]}
    recent = await ask(client, scope, "Kyoto", filters=window)
    assert ["Kyoto temples were quiet.\nLovely."] == [item.text for item in recent.items]


async def test_a_recall_appends_nothing_to_the_log_when_no_segment_was_used(
    stack: Stack, client: MemoryClient
) -> None:
    """Recall's one write is the segments it visited (heat): items alone leave the log as is."""
    scope = fresh_scope()
    memory_id = await client.remember(scope, "Allergic to peanuts.")
    await client.wait_until_applied()
    before = (await stack.js.stream_info(stack.settings.stream_name)).state.last_seq
    for _ in range(2):
        found = await ask(client, scope, "peanuts allergy", filters={"kinds": ["memory"]})
        assert [str(memory_id)] == [item.memory_id for item in found.items]
    await client.wait_until_applied()

    assert before == (await stack.js.stream_info(stack.settings.stream_name)).state.last_seq


async def test_the_budget_holds_and_replay_rebuilds_the_retrieval_models(
    stack: Stack, client: MemoryClient
) -> None:
    """The context stays in budget; replaying every projection gives identical checksums."""
    scope = fresh_scope(session_id="s1")
    for n in range(6):
        await client.record_turn(
            scope, f"I moved to Berlin in {2000 + n}.", "Ok.", occurred_at=T0 + timedelta(days=n)
        )
    await client.remember(scope, "I live in Berlin.", key="home")
    await client.forget(scope, key="home")
    await client.wait_until_applied()
    found = await client.recall(scope, "Berlin", max_tokens=40)
    assert found.tokens <= 40
    await ask(client, scope, "Berlin")
    await client.wait_until_applied()
    before = await read_model_checksums(stack.engine)

    retrieval = await stack.retrieval_resources()
    report = await replay(
        stack.js,
        stack.settings.stream_name,
        stack.engine,
        stack.sessions,
        build_projections(stack.settings, ALL_COMPONENTS, retrieval),
    )

    assert before == report.checksums
    after = await ask(client, scope, "Berlin", weights=ONLY["bm25"])
    assert 3 == len(after.items)  # the index was rebuilt in place; at most 3 per session
