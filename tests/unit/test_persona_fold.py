"""Unit tests for folding persona extractions into a user's LPM state."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import numpy as np

from memoryd.services.persona.projection import fold_extraction
from memoryd.shared.contracts import Scope
from memoryd.shared.contracts.memoryos import LearnedFact, PersonaExtracted
from memoryd.shared.domain.memoryos import DEFAULT_PARAMS, MemoryOsParams, encode_vector
from memoryd.shared.stores.persona import Persona

SCOPE = Scope(tenant="t", user_id="u")
T0 = datetime(2026, 1, 1, tzinfo=UTC)
VECTOR = encode_vector(np.array([1.0, 0.0], dtype=np.float32))


def extraction(n: int, city: str, traits: dict[str, str] | None = None) -> PersonaExtracted:
    """Return the n-th extraction, saying the user lives in ``city``."""
    return PersonaExtracted(
        event_id=uuid.UUID(int=n),
        occurred_at=T0 + timedelta(days=n),
        scope=SCOPE,
        cause_event_id=uuid.UUID(int=100 + n),
        segment_id="s",
        profile={"location": city},
        facts=(
            LearnedFact(
                attribute="location", value=city, text=f"The user lives in {city}.", vector=VECTOR
            ),
        ),
        traits=traits or {},
        agent_traits=(LearnedFact(text="Be brief.", vector=VECTOR),),
        turn_ids=(uuid.UUID(int=200 + n),),
        session_ids=("s1",),
        embedder="test",
        decided_by="test",
    )


def test_a_contradicting_fact_replaces_the_old_value_and_keeps_it_in_history() -> None:
    """Moving from Porto to Lisbon makes Lisbon current and keeps Porto in history."""
    persona = fold_extraction(Persona(), extraction(1, "Porto"), DEFAULT_PARAMS)
    persona = fold_extraction(persona, extraction(2, "Lisbon"), DEFAULT_PARAMS)

    assert "Lisbon" == persona.profile.attributes["location"].value
    assert [("location", "Porto", str(uuid.UUID(int=2)))] == [
        (old.attribute, old.value, old.replaced_by) for old in persona.profile.history
    ]


def test_folding_the_same_extraction_twice_changes_nothing() -> None:
    """A copy of an extraction (redelivery, replay) leaves the persona as it was."""
    once = fold_extraction(
        Persona(), extraction(1, "Porto", {"curious": "asks why"}), DEFAULT_PARAMS
    )
    twice = fold_extraction(once, extraction(1, "Porto", {"curious": "asks why"}), DEFAULT_PARAMS)

    assert once == twice
    assert 1 == twice.traits.dimensions["curious"].count


def test_the_knowledge_base_keeps_the_newest_facts_up_to_its_capacity() -> None:
    """Beyond capacity the oldest fact goes first."""
    params = MemoryOsParams(knowledge_capacity=2)
    persona = Persona()
    for n, city in enumerate(["Porto", "Lisbon", "Faro"], 1):
        persona = fold_extraction(persona, extraction(n, city), params)

    assert ["The user lives in Lisbon.", "The user lives in Faro."] == [
        fact.text for fact in persona.knowledge.facts
    ]
    assert 1 == len(persona.agent_traits.facts)
