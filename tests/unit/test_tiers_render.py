"""Unit tests for rendering the MemoryOS context into a prompt block."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from memoryd.services.recall.tiers import render_tiers
from memoryd.shared.contracts.recall import (
    FactItem,
    MemoryOsContext,
    ProfileItem,
    Provenance,
    SegmentItem,
)

AT = datetime(2026, 1, 1, tzinfo=UTC)
WHERE = Provenance(turn_ids=(uuid.UUID(int=1),), session_ids=("s1",))


def context() -> MemoryOsContext:
    """Return a context with a profile attribute and two facts."""
    return MemoryOsContext(
        profile=[ProfileItem(attribute="location", value="Lisbon", since=AT, provenance=WHERE)],
        knowledge=[
            FactItem(text="The user moved to Lisbon.", score=0.9, learned_at=AT, provenance=WHERE),
            FactItem(text="The user bakes bread.", score=0.2, learned_at=AT, provenance=WHERE),
        ],
    )


def test_the_block_lists_the_profile_then_the_knowledge() -> None:
    """Profile attributes come first, then facts, best first."""
    _, block, tokens = render_tiers(context(), 1_000)

    assert [
        "## User profile",
        "- location: Lisbon",
        "## What the user told before",
        "- The user moved to Lisbon.",
        "- The user bakes bread.",
    ] == block.splitlines()
    assert 0 < tokens


def test_a_short_budget_trims_the_block_from_the_tail() -> None:
    """Lines that do not fit the budget are dropped from the end."""
    _, full, full_tokens = render_tiers(context(), 1_000)
    kept, short, tokens = render_tiers(context(), full_tokens - 1)

    assert full.splitlines()[:-1] == short.splitlines()
    assert tokens < full_tokens
    assert ["The user moved to Lisbon."] == [fact.text for fact in kept.knowledge]


def test_a_segment_without_a_summary_is_shown_by_its_keywords() -> None:
    """Every segment the context lists is shown: no title over an empty section."""
    segment = SegmentItem(
        segment_id="seg", summary="", keywords=("bread", "oven"), page_count=1, heat=1, score=1
    )
    _, block, _ = render_tiers(MemoryOsContext(segments=[segment]), 1_000)

    assert ["## Related past topics", "- bread, oven"] == block.splitlines()


def test_an_empty_context_renders_nothing() -> None:
    """A user with no tiers yet gets an empty block."""
    assert (MemoryOsContext(), "", 0) == render_tiers(MemoryOsContext(), 1_000)
