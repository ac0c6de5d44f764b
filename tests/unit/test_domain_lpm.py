"""Unit tests for long-term persona memory: profile, knowledge base, traits and agent traits."""

# STYLE.md puts the expected value first in asserts, which SIM300 calls a Yoda condition.

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.shared.domain.lpm import (
    AgentTraits,
    Fact,
    KnowledgeBase,
    Profile,
    ReplacedEntry,
    Traits,
    add_facts,
    apply_fact,
    apply_trait_evidence,
    clear_attribute,
    fact_identity,
    rank_by_similarity,
)
from memoryd.shared.domain.memoryos import unit_vector

T0 = datetime(2025, 1, 1, tzinfo=UTC)
T1 = T0 + timedelta(days=1)
T2 = T0 + timedelta(days=2)


def fact(text: str, vector: tuple[float, ...] = (1.0, 0.0), at: datetime = T0) -> Fact:
    """Build a fact learned at ``at`` from event ``e-<text>``."""
    return Fact(text=text, vector=unit_vector(vector), at=at, source=f"e-{text}")


def texts(facts: tuple[Fact, ...] | list[Fact]) -> list[str]:
    """Return the texts of ``facts`` in order."""
    return [item.text for item in facts]


def test_apply_fact_sets_a_new_attribute() -> None:
    """A new attribute takes the value with its source and time, and no history."""
    profile = apply_fact(Profile(), "city", "Paris", T0, "e1")
    entry = profile.attributes["city"]
    assert ("Paris", T0, "e1") == (entry.value, entry.at, entry.source)
    assert () == profile.history


def test_new_value_replaces_and_keeps_the_old_in_history() -> None:
    """Moving from Paris to Lyon makes Lyon current and keeps Paris, superseded by e2."""
    profile = apply_fact(apply_fact(Profile(), "city", "Paris", T0, "e1"), "city", "Lyon", T1, "e2")
    assert "Lyon" == profile.attributes["city"].value
    expected = ReplacedEntry(
        attribute="city", value="Paris", at=T0, source="e1", replaced_at=T1, replaced_by="e2"
    )
    assert (expected,) == profile.history


def test_restating_the_current_value_changes_nothing() -> None:
    """Saying the same value again leaves the profile, its source and its history as they were."""
    profile = apply_fact(Profile(), "city", "Paris", T0, "e1")
    assert profile == apply_fact(profile, "city", "Paris", T1, "e2")


def test_a_late_older_value_goes_to_history_only() -> None:
    """A value stated before the current one stays current; the late one is kept as replaced."""
    profile = apply_fact(Profile(), "city", "Lyon", T1, "e2")
    late = apply_fact(profile, "city", "Paris", T0, "e1")
    assert "Lyon" == late.attributes["city"].value
    assert [("Paris", "e2")] == [(entry.value, entry.replaced_by) for entry in late.history]
    assert late == apply_fact(late, "city", "Paris", T0, "e1")


def test_three_values_keep_the_full_history_in_order() -> None:
    """Every replaced value stays in history, oldest first."""
    profile = Profile()
    for value, at, source in [("Paris", T0, "e1"), ("Lyon", T1, "e2"), ("Nice", T2, "e3")]:
        profile = apply_fact(profile, "city", value, at, source)
    assert "Nice" == profile.attributes["city"].value
    assert ["Paris", "Lyon"] == [entry.value for entry in profile.history]


def test_other_attributes_are_untouched() -> None:
    """Changing one attribute leaves the others as they were."""
    profile = apply_fact(apply_fact(Profile(), "city", "Paris", T0, "e1"), "job", "nurse", T0, "e1")
    changed = apply_fact(profile, "city", "Lyon", T1, "e2")
    assert profile.attributes["job"] == changed.attributes["job"]


def test_clear_attribute_moves_the_value_to_history() -> None:
    """Clearing an attribute removes it and keeps its last value in history."""
    cleared = clear_attribute(apply_fact(Profile(), "city", "Paris", T0, "e1"), "city", T1, "e9")
    assert {} == cleared.attributes
    assert [("Paris", "e9")] == [(entry.value, entry.replaced_by) for entry in cleared.history]


def test_clear_of_an_unknown_attribute_changes_nothing() -> None:
    """Clearing an attribute that is not set leaves the profile as it was."""
    profile = apply_fact(Profile(), "city", "Paris", T0, "e1")
    assert profile == clear_attribute(profile, "job", T1, "e9")


def test_profile_round_trips_through_json() -> None:
    """A profile with history loads back equal from its canonical JSON."""
    profile = apply_fact(apply_fact(Profile(), "city", "Paris", T0, "e1"), "city", "Lyon", T1, "e2")
    assert profile == Profile.from_json(profile.to_json())


def test_add_facts_appends_in_order() -> None:
    """New facts are appended after the ones held, and nothing is evicted under capacity."""
    kb, evicted = add_facts(KnowledgeBase(facts=(fact("a"),)), [fact("b"), fact("c")], capacity=3)
    assert (["a", "b", "c"], []) == (texts(kb.facts), texts(evicted))


def test_add_facts_keeps_the_same_text_once() -> None:
    """A fact already held, even with other case or spacing, is not added again."""
    kb, _ = add_facts(
        KnowledgeBase(), [fact("Likes  tea"), fact("likes tea"), fact("x")], capacity=5
    )
    again, _ = add_facts(kb, [fact("LIKES TEA")], capacity=5)
    assert ["Likes  tea", "x"] == texts(again.facts)


def test_add_facts_evicts_the_oldest_first() -> None:
    """Over capacity, the oldest facts leave first and are handed back, oldest first."""
    kb, _ = add_facts(KnowledgeBase(), [fact("a"), fact("b"), fact("c")], capacity=3)
    kb, evicted = add_facts(kb, [fact("d"), fact("e")], capacity=3)
    assert (["c", "d", "e"], ["a", "b"]) == (texts(kb.facts), texts(evicted))


def test_a_batch_larger_than_capacity_keeps_its_newest() -> None:
    """More new facts than capacity: the newest stay, the rest come back as evicted."""
    kb, evicted = add_facts(KnowledgeBase(), [fact(t) for t in "abcd"], capacity=2)
    assert (["c", "d"], ["a", "b"]) == (texts(kb.facts), texts(evicted))


def test_add_facts_refuses_a_zero_capacity() -> None:
    """A capacity below one is a configuration error, not an empty store."""
    with pytest.raises(ValueError, match="capacity"):
        add_facts(KnowledgeBase(), [fact("a")], capacity=0)


def test_agent_traits_stay_agent_traits() -> None:
    """Adding to the agent's traits returns agent traits, bounded by their own capacity."""
    traits, evicted = add_facts(AgentTraits(), [fact("I cook"), fact("I hike")], capacity=1)
    assert isinstance(traits, AgentTraits)
    assert (["I hike"], ["I cook"]) == (texts(traits.facts), texts(evicted))


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.lists(st.sampled_from("abcdefghij"), max_size=6), max_size=8),
    capacity=st.integers(min_value=1, max_value=5),
)
def test_fifo_stays_bounded_and_loses_nothing_silently(
    batches: list[list[str]], capacity: int
) -> None:
    """The FIFO never exceeds capacity, never repeats a fact, and every fact added is kept or
    handed back as evicted."""
    kb = KnowledgeBase()
    evicted_all: list[str] = []
    seen: list[str] = []
    for batch in batches:
        kb, evicted = add_facts(kb, [fact(text) for text in batch], capacity=capacity)
        evicted_all += texts(evicted)
        seen += batch
        assert len(kb.facts) <= capacity
        assert len(set(texts(kb.facts))) == len(kb.facts)
    assert set(seen) <= set(texts(kb.facts)) | set(evicted_all)


def test_fact_identity_ignores_case_and_spacing() -> None:
    """Facts differing only in case and spacing have the same identity."""
    assert fact_identity("likes tea") == fact_identity("  Likes\tTEA ")


def test_knowledge_base_round_trips_through_json() -> None:
    """A knowledge base loads back equal, vectors included, from its canonical JSON."""
    kb, _ = add_facts(KnowledgeBase(), [fact("a", (0.6, 0.8)), fact("b")], capacity=5)
    assert kb == KnowledgeBase.from_json(kb.to_json())


def test_rank_knowledge_by_similarity() -> None:
    """The facts closest to the query come first, at most top_k."""
    facts = [fact("far", (0.0, 1.0)), fact("near", (1.0, 0.0)), fact("mid", (0.6, 0.8))]
    ranked = rank_by_similarity(unit_vector([1.0, 0.0]), facts, top_k=2)
    assert ["near", "mid"] == [entry.item.text for entry in ranked]


def test_trait_evidence_counts_and_keeps_the_latest() -> None:
    """Two events about a trait count 2 and keep the second event's evidence."""
    traits = apply_trait_evidence(Traits(), {"music": "plays piano"}, at=T0, source="e1")
    traits = apply_trait_evidence(traits, {"music": "went to a concert"}, at=T1, source="e2")
    entry = traits.dimensions["music"]
    assert (2, "went to a concert", "e2") == (entry.count, entry.latest, entry.source)


def test_traits_are_independent() -> None:
    """Evidence for one trait does not touch another."""
    traits = apply_trait_evidence(
        Traits(), {"music": "piano", "travel": "Japan"}, at=T0, source="e1"
    )
    traits = apply_trait_evidence(traits, {"music": "guitar"}, at=T1, source="e2")
    assert (2, 1) == (traits.dimensions["music"].count, traits.dimensions["travel"].count)


def test_blank_evidence_is_ignored() -> None:
    """A trait with blank evidence is not recorded."""
    traits = apply_trait_evidence(Traits(), {"music": "  ", "travel": "Japan"}, at=T0, source="e1")
    assert ["travel"] == list(traits.dimensions)


def test_the_same_event_counts_once() -> None:
    """Applying the same event's evidence twice counts it once."""
    once = apply_trait_evidence(Traits(), {"music": "piano"}, at=T0, source="e1")
    assert once == apply_trait_evidence(once, {"music": "piano"}, at=T0, source="e1")


def test_late_evidence_counts_but_keeps_the_newer() -> None:
    """Evidence from an earlier time counts, but the newer evidence stays the latest."""
    traits = apply_trait_evidence(Traits(), {"music": "guitar"}, at=T1, source="e2")
    traits = apply_trait_evidence(traits, {"music": "piano"}, at=T0, source="e1")
    entry = traits.dimensions["music"]
    assert (2, "guitar") == (entry.count, entry.latest)


def test_traits_round_trip_through_json() -> None:
    """Traits load back equal from their canonical JSON."""
    traits = apply_trait_evidence(
        Traits(), {"music": "piano", "travel": "Japan"}, at=T0, source="e"
    )
    assert traits == Traits.from_json(traits.to_json())
