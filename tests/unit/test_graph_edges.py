"""Unit tests of the bi-temporal edge rule: a newer value ends the older, nothing is deleted."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from memoryd.shared.domain.graph import TimedEdge, add_edge, add_edges

T0 = datetime(2026, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def fact(n: int, target: str, at: datetime, relation: str = "lives_in") -> TimedEdge:
    """Return the user's fact number ``n``: ``user -relation-> target`` from ``at``."""
    return TimedEdge(uuid.UUID(int=n), "user", relation, target, at)


def test_a_newer_value_of_a_single_valued_relation_ends_the_older_edge() -> None:
    """Moving to Berlin ends Lisbon when Berlin starts; Berlin stays valid."""
    lisbon = fact(1, "lisbon", T0)
    change = add_edge([lisbon], fact(2, "berlin", T0 + DAY))
    assert ({lisbon.edge_id: T0 + DAY}, (fact(2, "berlin", T0 + DAY),)) == (
        change.invalidate,
        change.insert,
    )


def test_restating_the_same_value_ends_nothing() -> None:
    """Saying again that I live in Lisbon keeps the first Lisbon edge valid."""
    change = add_edge([fact(1, "lisbon", T0)], fact(2, "lisbon", T0 + DAY))
    assert {} == change.invalidate


def test_a_relation_with_many_targets_never_ends_an_edge() -> None:
    """Liking tea does not end liking coffee."""
    coffee = fact(1, "coffee", T0, "likes")
    change = add_edge([coffee], fact(2, "tea", T0 + DAY, "likes"))
    assert ({}, None) == (change.invalidate, change.insert[0].invalid_at)


def test_an_older_fact_learned_late_ends_when_the_newer_one_starts() -> None:
    """Hearing later that I lived in Lisbon last year: Lisbon ends when Berlin began."""
    berlin = fact(1, "berlin", T0 + 10 * DAY)
    change = add_edge([berlin], fact(2, "lisbon", T0))
    assert ({}, T0 + 10 * DAY) == (change.invalidate, change.insert[0].invalid_at)


def test_an_edge_already_ended_keeps_its_end() -> None:
    """A third city ends only the edge that is still valid, and deletes none."""
    lisbon = fact(
        1,
        "lisbon",
        T0,
    )
    berlin = fact(2, "berlin", T0 + DAY)
    ended = replace(lisbon, invalid_at=T0 + DAY)
    change = add_edge([ended, berlin], fact(3, "paris", T0 + 2 * DAY))
    assert {berlin.edge_id: T0 + 2 * DAY} == change.invalidate


def test_other_sources_and_relations_are_not_touched() -> None:
    """Anna's home and my job are not ended by my move."""
    anna = TimedEdge(uuid.UUID(int=1), "anna", "lives_in", "rome", T0)
    job = fact(2, "acme", T0, "works_at")
    change = add_edge([anna, job], fact(3, "berlin", T0 + DAY))
    assert {} == change.invalidate


def test_several_facts_of_one_extraction_apply_in_order() -> None:
    """Two homes said at once: the second ends the first (inserted already ended)."""
    lisbon, berlin = fact(1, "lisbon", T0), fact(2, "berlin", T0)
    change = add_edges([], [lisbon, berlin])
    assert ({}, [T0, None]) == (change.invalidate, [e.invalid_at for e in change.insert])
