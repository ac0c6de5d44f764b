"""Unit tests of how an extraction is decided and recorded as a GraphExtracted event."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from memoryd.services.graph.extraction import decide, extract, recorded
from memoryd.services.runtime.decisions import MemoryDecisionLog
from memoryd.shared.adapters.llm import LlmFailure, OfflineExtractor
from memoryd.shared.adapters.llm.port import Entity, GraphExtraction, Relation
from memoryd.shared.contracts.events import TurnRecorded, derived_id
from memoryd.shared.contracts.memoryos import LlmStepFailed
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


class FailingLlm(OfflineExtractor):
    """An LLM whose graph step always fails (the circuit is open)."""

    async def extract_graph(self, text: str) -> GraphExtraction:
        raise LlmFailure("extract_graph", "circuit open", 0)


async def test_a_failed_llm_step_falls_back_to_the_offline_rules_and_is_recorded() -> None:
    """The offline extractor answers; each side that failed becomes one llm.step_failed."""
    turn = TURN.model_copy(update={"response": "Lisbon is lovely."})
    decisions = MemoryDecisionLog()
    found = await extract(FailingLlm(), decisions, turn)
    failures = [e for e in decisions.events.values() if isinstance(e, LlmStepFailed)]

    assert await extract(OfflineExtractor(), MemoryDecisionLog(), turn) == found
    assert [("extract_graph", "offline-v1")] * 2 == [(f.step, f.fallback) for f in failures]
    assert 2 == len({f.event_id for f in failures})
    assert {turn.event_id} == {f.cause_event_id for f in failures}


async def test_a_working_extractor_records_only_the_extraction() -> None:
    """With no failure, the decision log holds one GraphExtracted and nothing else."""
    decisions = MemoryDecisionLog()
    extracted = await decide(OfflineExtractor(), decisions, TURN)
    assert [extracted] == list(decisions.events.values())


async def test_a_redecided_trigger_returns_the_extraction_the_log_kept() -> None:
    """A redelivered turn whose extractor now answers differently gets the first answer."""
    decisions = MemoryDecisionLog()
    first = await decisions.record(recorded(TURN, GraphExtraction()))
    again = await decide(OfflineExtractor(), decisions, TURN)
    assert (first, ()) == (again, again.relations)
