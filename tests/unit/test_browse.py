"""The memory browser's view of a user: how the read models' rows are arranged (pure)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import numpy as np

from memoryd.services.recall.browse import browsed_segments, graph_views, newest_memories
from memoryd.shared.domain.memoryos import DEFAULT_PARAMS
from memoryd.shared.domain.mtm import Segment

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def segment(segment_id: str, visits: int, interactions: int) -> Segment:
    return Segment(
        id=segment_id,
        vector=np.ones(4, dtype=np.float32) / 2,
        mean_norm=1.0,
        summary=f"about {segment_id}",
        page_count=interactions,
        n_visit=visits,
        l_interaction=interactions,
        last_visit_at=T0,
        created_at=T0,
    )


def page(segment_id: str, minute: int) -> dict[str, object]:
    return {
        "turn_id": uuid.uuid4(),
        "segment_id": segment_id,
        "session_id": "s1",
        "agent_id": "bot",
        "query": f"q{minute}",
        "response": "r",
        "occurred_at": (T0 + timedelta(minutes=minute)).replace(tzinfo=None),  # as SQLite reads
    }


def test_segments_come_hottest_first_with_their_newest_pages_first() -> None:
    """Heat orders the segments; each carries its own pages, newest first, within the limit."""
    cold, hot = (
        segment("bread", visits=0, interactions=1),
        segment("stars", visits=3, interactions=2),
    )
    pages = [page("stars", 1), page("bread", 2), page("stars", 3)]

    shown = browsed_segments([cold, hot], pages, T0, DEFAULT_PARAMS, limit=10)
    limited = browsed_segments([cold, hot], pages, T0, DEFAULT_PARAMS, limit=1)

    assert ["stars", "bread"] == [s.segment_id for s in shown]
    assert shown[0].heat > shown[1].heat
    assert (3, 2) == (shown[0].visits, shown[0].interactions)
    assert ["q3", "q1"] == [p.query for p in shown[0].pages]
    assert T0 + timedelta(minutes=3) == shown[0].pages[0].occurred_at  # UTC, not naive
    assert [("stars", ["q3"])] == [(s.segment_id, [p.query for p in s.pages]) for s in limited]


def test_relations_are_named_by_their_entities_and_keep_their_validity() -> None:
    """A relation shows its entities' names; one a later fact ended keeps its invalid_at."""
    nodes = [
        {
            "name_key": "alice",
            "name": "Alice",
            "entity_type": "person",
            "first_seen_at": T0,
            "mentions": 2,
        },
        {
            "name_key": "lisbon",
            "name": "Lisbon",
            "entity_type": "place",
            "first_seen_at": T0,
            "mentions": 1,
        },
    ]
    item = uuid.uuid4()
    edges = [
        {
            "source_key": "alice",
            "relation": "lives_in",
            "target_key": "porto",
            "valid_at": T0 + timedelta(days=1),
            "invalid_at": None,
            "item_id": item,
        },
        {
            "source_key": "alice",
            "relation": "lives_in",
            "target_key": "lisbon",
            "valid_at": T0,
            "invalid_at": T0 + timedelta(days=1),
            "item_id": item,
        },
    ]

    entities, relations = graph_views(nodes, edges)

    assert ["Alice", "Lisbon"] == [e.name for e in entities]
    assert [("Alice", "porto", None), ("Alice", "Lisbon", T0 + timedelta(days=1))] == [
        (r.source, r.target, r.invalid_at) for r in relations
    ]


def test_memories_come_newest_change_first_within_the_limit() -> None:
    """The most recently changed memory leads; the limit keeps the newest."""

    def memory(content: str, minute: int) -> dict[str, object]:
        at = T0 + timedelta(minutes=minute)
        return {
            "memory_id": uuid.uuid4(),
            "key": None,
            "content": content,
            "category": "core",
            "memory_type": "semantic",
            "importance": 0.5,
            "evergreen": False,
            "metadata": {},
            "user_id": "alice",
            "agent_id": "bot",
            "session_id": None,
            "namespace": "default",
            "created_at": at,
            "updated_at": at,
            "expires_at": None,
        }

    rows = [memory("old", 1), memory("new", 5), memory("middle", 3)]

    assert ["new", "middle"] == [m.content for m in newest_memories(rows, 2)]
