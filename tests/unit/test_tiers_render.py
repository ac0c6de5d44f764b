"""Unit tests for rendering the MemoryOS context into a prompt block."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from memoryd.services.recall.tiers import render_tiers
from memoryd.shared.contracts.recall import FactItem, MemoryOsContext, ProfileItem, Provenance

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
    block, tokens = render_tiers(context(), 1_000)

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
    full, full_tokens = render_tiers(context(), 1_000)
    short, tokens = render_tiers(context(), full_tokens - 1)

    assert full.splitlines()[:-1] == short.splitlines()
    assert tokens < full_tokens


def test_an_empty_context_renders_nothing() -> None:
    """A user with no tiers yet gets an empty block."""
    assert ("", 0) == render_tiers(MemoryOsContext(), 1_000)
