"""Persona asks the LLM and embeds a promotion's facts before its transaction.

Inside the transaction both held SQLite's one write lock while every other projection
waited. Warmed, the transaction asks neither; an LLM failure met while warming is recorded
in the transaction like one met there, and answered by the offline extractor.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.persona.projection import PersonaProjection
from memoryd.services.runtime.decisions import MemoryDecisionLog
from memoryd.services.runtime.projection import Positioned, apply_once
from memoryd.shared.adapters.embeddings import CachedEmbedder, MemoryEmbeddingStore
from memoryd.shared.adapters.llm import LlmFailure, OfflineExtractor, PageText
from memoryd.shared.adapters.llm import PersonaExtraction as Extraction
from memoryd.shared.contracts import Scope
from memoryd.shared.contracts.memoryos import LlmStepFailed, PromotedPage, SegmentPromoted
from memoryd.shared.domain.memoryos import DEFAULT_PARAMS
from memoryd.shared.stores import persona
from tests.fakes import HashEmbedder

SCOPE = Scope(tenant="acme", user_id="alice", session_id="s1")
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


class CountingLlm(OfflineExtractor):
    """The offline extractor as the LLM, counting persona questions; ``failing``: each fails."""

    name = "counting-llm"

    def __init__(self, *, failing: bool = False) -> None:
        super().__init__()
        self.failing = failing
        self.asked = 0

    async def extract_persona(self, pages: Sequence[PageText]) -> Extraction:
        self.asked += 1
        if self.failing:
            raise LlmFailure("extract_persona", "circuit open", 0)
        return await super().extract_persona(pages)


def promoted() -> SegmentPromoted:
    page = PromotedPage(
        turn_id=uuid.uuid4(),
        session_id="s1",
        query="I live in Lisbon and I work as a nurse.",
        response="",
    )
    return SegmentPromoted(
        occurred_at=T0,
        scope=SCOPE,
        cause_event_id=uuid.uuid4(),
        segment_id="seg-1",
        heat=6.0,
        visits_at_promotion=0,
        pages=(page,),
    )


def projection_with(
    llm: CountingLlm, model: HashEmbedder, decisions: MemoryDecisionLog
) -> PersonaProjection:
    embedder = CachedEmbedder(model, MemoryEmbeddingStore())
    return PersonaProjection(embedder, llm, decisions, DEFAULT_PARAMS)


async def apply_live(
    sessions: async_sessionmaker[AsyncSession],
    projection: PersonaProjection,
    event: SegmentPromoted,
    decisions: MemoryDecisionLog,
) -> None:
    """Apply the promotion live: the decision log stands in for the publisher (nothing here
    derives an event to publish)."""
    await apply_once(sessions, projection, [Positioned(event, 1)], decisions)  # type: ignore[arg-type]


async def test_a_warmed_promotion_asks_neither_the_llm_nor_the_model_in_its_transaction(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    llm, model, decisions = CountingLlm(), HashEmbedder(), MemoryDecisionLog()
    projection = projection_with(llm, model, decisions)
    event = promoted()

    await projection.warm([event])
    asked_before, embedded_before = llm.asked, len(model.calls)
    await apply_live(sessions, projection, event, decisions)

    async with sessions() as session:
        held = await persona.load_persona(session, ("acme", "alice"))
    assert (1, 1) == (asked_before, embedded_before)
    assert (1, 1) == (llm.asked, len(model.calls))  # nothing more in the transaction
    assert "Lisbon" in {attribute.value for attribute in held.profile.attributes.values()}
    assert held.knowledge.facts  # the facts, with the vectors warm embedded


async def test_an_llm_failure_met_warming_is_recorded_once_and_answered_offline(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    llm, decisions = CountingLlm(failing=True), MemoryDecisionLog()
    projection = projection_with(llm, HashEmbedder(), decisions)
    event = promoted()

    await projection.warm([event])
    await apply_live(sessions, projection, event, decisions)

    failures = [e for e in decisions.events.values() if isinstance(e, LlmStepFailed)]
    async with sessions() as session:
        held = await persona.load_persona(session, ("acme", "alice"))
    assert 1 == llm.asked  # the transaction did not ask the failing LLM again
    assert [("extract_persona", "offline-v1")] == [(f.step, f.fallback) for f in failures]
    assert "Lisbon" in {attribute.value for attribute in held.profile.attributes.values()}
