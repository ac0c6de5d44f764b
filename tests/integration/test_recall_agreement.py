"""A recall response's structured fields and its one prompt block agree, on a real stack."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memoryd.services.bootstrap import ALL_COMPONENTS, start_stack
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope
from memoryd.shared.contracts.recall import RecallResponse
from memoryd.shared.settings import Settings
from tests.conftest import _delete_streams, _reset_database, unique

pytestmark = [pytest.mark.integration, pytest.mark.model]

T0 = datetime(2026, 3, 2, 9, tzinfo=UTC)
EPISODES = ("turn", "page", "segment")


def sections(context: str) -> dict[str, str]:
    """Split a prompt block into its ``## Title`` sections and their text."""
    found: dict[str, list[str]] = {}
    current: list[str] = []
    for line in context.splitlines():
        if line.startswith("## "):
            current = found.setdefault(line[3:], [])
        else:
            current.append(line)
    return {title: "\n".join(lines) for title, lines in found.items()}


def expected_sections(answer: RecallResponse) -> dict[str, str]:
    """Render what the structured fields hold, section by section, as the README documents."""
    on_page = {str(page.turn_id) for page in answer.pages}
    tiers = answer.memoryos
    wanted = {
        "Recent conversation": [
            line for p in answer.pages for line in (f"User: {p.query}", f"Agent: {p.response}")
        ],
        "Memories": [f"- {m.content}" for m in answer.memories],
        "Related conversation": [
            f"- {i.text}" for i in answer.items if i.kind in EPISODES and i.turn_id not in on_page
        ],
        "Knowledge": [f"- {i.text}" for i in answer.items if i.kind == "fact"],
        "User profile": [f"- {p.attribute}: {p.value}" for p in tiers.profile],
        "What the user told before": [f"- {f.text}" for f in tiers.knowledge],
        "Related past topics": [
            f"- {s.summary or ', '.join(s.keywords) or s.segment_id}" for s in tiers.segments
        ],
        "Related past exchanges": [
            line
            for p in tiers.segment_pages
            for line in (f"User: {p.query}", f"Agent: {p.response}")
        ],
        "User traits": [f"- {t.trait_id}: {t.evidence}" for t in tiers.traits],
        "What the user wants from the agent": [f"- {f.text}" for f in tiers.agent_traits],
    }
    return {title: "\n".join(lines) for title, lines in wanted.items() if lines}


def assert_agrees(answer: RecallResponse) -> None:
    """Every item rendered in the context is in the structured fields, and vice versa."""
    assert expected_sections(answer) == sections(answer.context)
    listed = {m.memory_id for m in answer.memories}
    assert all(
        i.memory_id is not None and i.memory_id in {str(m) for m in listed}
        for i in answer.items
        if i.kind == "memory"
    )
    assert "context" not in answer.memoryos.model_dump()  # one prompt block: ``context``


@pytest.mark.parametrize("max_tokens", [2_000, 120])
async def test_recall_fields_and_context_agree(settings: Settings, max_tokens: int) -> None:
    """Pages, memories, hybrid items and MemoryOS tiers: each is in the context iff listed."""
    tuned = settings.model_copy(update={"stm_capacity": 2})
    await _delete_streams(tuned.nats_url or "", tuned)
    await _reset_database(tuned)
    stack = await start_stack(tuned, ALL_COMPONENTS)
    scope = Scope(tenant=unique("t"), user_id=unique("u"), session_id="s1")
    turns = [
        ("I bake sourdough bread every weekend", "Lovely!"),
        ("My oven runs hot so I bake at 220 degrees", "Good to know."),
        ("I moved to Lisbon last spring", "Exciting!"),
        ("I take the tram to work", "Handy."),
        ("Recommend a bakery near me?", "Try one in Alfama."),
    ]
    try:
        async with await MemoryClient.connect(stack.nats_url, tuned.stream_name) as client:
            for n, (query, response) in enumerate(turns):
                at = T0 + timedelta(minutes=n)
                await client.record_turn(scope, query, response, occurred_at=at)
            await client.remember(scope, "Alice avoids meat entirely", key="diet")
            await client.remember(scope, "Alice bakes bread on Saturdays", key="baking")
            await client.wait_until_applied(timeout=90)
            answer = await client.recall(
                scope, "What food should I cook for dinner?", max_tokens=max_tokens, timeout=30
            )
    finally:
        await stack.stop()
        await _delete_streams(tuned.nats_url or "", tuned)

    assert answer.context
    assert answer.tokens <= max_tokens
    assert_agrees(answer)
    if max_tokens == 2_000:
        assert {"Alice avoids meat entirely", "Alice bakes bread on Saturdays"} == {
            m.content for m in answer.memories
        }
        assert answer.memoryos.segments
