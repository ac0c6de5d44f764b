"""Pure recall logic: keyword matching, ranking and the token budget."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from memoryd.services.recall.hybrid import assemble
from memoryd.services.recall.service import rank_memories
from memoryd.shared.contracts import Category, MemoryType, PageItem
from memoryd.shared.domain.memories import expires_at, keyword_score
from memoryd.shared.domain.text import estimate_tokens, terms

NOW = datetime(2026, 1, 5, tzinfo=UTC)


def memory_row(content: str, importance: float = 0.5) -> dict[str, object]:
    """Return a memories-table row."""
    return {
        "memory_id": uuid.uuid4(),
        "key": None,
        "content": content,
        "category": Category.CORE,
        "memory_type": MemoryType.SEMANTIC,
        "importance": importance,
        "evergreen": False,
        "metadata": {},
        "user_id": "u",
        "agent_id": "default",
        "session_id": None,
        "created_at": NOW,
    }


def test_terms_are_stemmed_and_stopwords_dropped() -> None:
    """'Running to the shops' and 'runs shop' share their terms."""
    assert set(terms("runs shop")) == set(terms("Running to the shops"))


def test_a_memory_sharing_no_term_does_not_match() -> None:
    """No shared term scores zero; a shared term scores above zero."""
    assert 0.0 == keyword_score("favourite colour", "lives in Lisbon", 0.9)
    assert keyword_score("where does she live", "lives in Lisbon", 0.1) > 0


def test_ranking_puts_the_better_match_first_and_drops_non_matches() -> None:
    """The memory sharing more query terms ranks first; unrelated ones are left out."""
    rows = [
        memory_row("likes green tea"),
        memory_row("green tea in the morning, every day"),
        memory_row("owns a bicycle"),
    ]
    ranked = rank_memories("green tea morning", rows, limit=10)
    assert ["green tea in the morning, every day", "likes green tea"] == [m.content for m in ranked]


def test_daily_memories_expire_after_their_ttl_and_core_never() -> None:
    """Daily memories get an expiry 30 days out; core ones none."""
    assert NOW + timedelta(days=30) == expires_at(Category.DAILY, NOW, 30)
    assert expires_at(Category.CORE, NOW, 30) is None


@given(st.integers(min_value=1, max_value=400), st.integers(min_value=0, max_value=20))
def test_the_context_never_exceeds_the_token_budget(budget: int, count: int) -> None:
    """Whatever the budget, the rendered items fit in it, newest pages first."""
    pages = [
        PageItem(
            turn_id=uuid.uuid4(),
            session_id=None,
            agent_id="a",
            query=f"question {i}" * 3,
            response=f"answer {i}" * 5,
            occurred_at=NOW,
        )
        for i in range(count)
    ]
    memories = rank_memories("", [memory_row(f"fact {i} " * 4) for i in range(count)], 100)
    context, kept_pages, kept_memories, _, used = assemble(pages, memories, [], budget)
    assert used <= budget
    assert estimate_tokens(context) <= budget
    assert pages[len(pages) - len(kept_pages) :] == kept_pages
    assert all(f"- {m.content}" in context for m in kept_memories)
