"""With an LLM configured but unreachable, the graph falls back to the offline extractor."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from memoryd.services.bootstrap import ALL_COMPONENTS, start_stack
from memoryd.shared import subjects
from memoryd.shared.adapters.dead_letters import read_dead_letters
from memoryd.shared.adapters.sql.tables import graph_edges
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope, decode_event
from memoryd.shared.contracts.memoryos import LlmStepFailed
from memoryd.shared.contracts.retrieval import GraphExtracted
from memoryd.shared.settings import Settings
from tests.conftest import _delete_streams, _reset_database, unique

pytestmark = [pytest.mark.integration, pytest.mark.model]

T0 = datetime(2026, 3, 2, 9, tzinfo=UTC)


def unreachable_url() -> str:
    """Return a loopback URL nothing listens on (a port just bound and released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


async def test_an_unreachable_llm_leaves_the_graph_to_the_offline_extractor(
    settings: Settings,
) -> None:
    """Graph steps fail over to the offline rules, are logged as llm.step_failed, none parked."""
    tuned = settings.model_copy(
        update={"llm_base_url": unreachable_url(), "llm_attempts": 1, "llm_timeout_seconds": 2.0}
    )
    await _delete_streams(tuned.nats_url or "", tuned)
    await _reset_database(tuned)
    stack = await start_stack(tuned, ALL_COMPONENTS)
    scope = Scope(tenant=unique("t"), user_id=unique("u"), session_id="s1")
    said = ["I live in Lisbon.", "I work at Acme.", "I moved to Berlin.", "I drive a Volvo."]
    try:
        async with await MemoryClient.connect(stack.nats_url, tuned.stream_name) as client:
            for n, query in enumerate(said):
                await client.record_turn(scope, query, "Noted.", occurred_at=T0 + timedelta(n))
            await client.remember(scope, "I live in Berlin near the river.", key="home")
            await client.wait_until_applied(timeout=90)
            parked = (await stack.js.stream_info(tuned.dead_letter_stream)).state.messages
            # read_dead_letters asks for sequence 0 of an empty stream (a 400): read only some.
            letters = await read_dead_letters(stack.js, tuned.dead_letter_stream) if parked else []
            info = await stack.js.stream_info(tuned.stream_name)
            events = [
                decode_event((await stack.js.get_msg(tuned.stream_name, seq)).data or b"")
                for seq in range(info.state.first_seq, info.state.last_seq + 1)
            ]
            async with stack.sessions() as session:
                edges = {
                    (row.relation, row.target_key)
                    for row in await session.execute(
                        select(graph_edges.c.relation, graph_edges.c.target_key).where(
                            graph_edges.c.user_id == scope.user_id
                        )
                    )
                }
    finally:
        await stack.stop()
        await _delete_streams(tuned.nats_url or "", tuned)

    graph_failures = [e for e in events if isinstance(e, LlmStepFailed) and "graph" in e.step]
    extracted = [e for e in events if isinstance(e, GraphExtracted)]
    assert [] == [letter.reason for letter in letters if letter.consumer == subjects.GRAPH_CONSUMER]
    assert len(said) + 1 == len(extracted)
    assert {("lives_in", "lisbon"), ("works_at", "acme")} <= edges
    assert graph_failures
    assert {"offline-v1"} == {f.fallback for f in graph_failures}
    assert {e.cause_event_id for e in extracted} >= {f.cause_event_id for f in graph_failures}
