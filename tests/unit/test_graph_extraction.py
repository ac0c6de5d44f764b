"""Unit tests of how an extraction is recorded as a GraphExtracted event."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from memoryd.services.graph.extraction import recorded
from memoryd.shared.adapters.llm.port import Entity, GraphExtraction, Relation
from memoryd.shared.contracts.events import TurnRecorded, derived_id
from memoryd.shared.contracts.scope import Scope

NOW = datetime(2026, 3, 1, tzinfo=UTC)
TURN = TurnRecorded(
    event_id=uuid.UUID(int=7),
    occurred_at=NOW,
    scope=Scope(tenant="t", user_id="u"),
    query="I live in Lisbon.",
    response="",
)


def test_the_record_has_a_deterministic_id_and_is_valid_from_the_turn() -> None:
    """Re-deciding the same turn yields the same event id, valid from when the turn happened."""
    found = GraphExtraction(
        entities=(Entity(name="Lisbon", type="place"),),
        relations=(Relation(source="user", relation="lives_in", target="Lisbon"),),
    )
    event = recorded(TURN, found)
    assert derived_id(TURN.event_id, "graph.extracted") == event.event_id
    assert (NOW, TURN.event_id) == (event.valid_at, event.cause_event_id)
    assert ["Lisbon"] == [entity.name for entity in event.entities]


def test_junk_names_are_dropped_instead_of_failing_the_turn() -> None:
    """A 300-character 'name' (an encoded blob) is left out; the real entity stays."""
    blob = "PHN2Zy" * 50
    found = GraphExtraction(
        entities=(Entity(name=blob), Entity(name="Lisbon", type="place")),
        relations=(Relation(source="user", relation="knows", target=blob),),
    )
    event = recorded(TURN, found)
    assert (["Lisbon"], ()) == ([e.name for e in event.entities], event.relations)
