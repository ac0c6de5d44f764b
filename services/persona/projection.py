"""The persona projection (LPM): profile, knowledge base, traits and agent traits per user.

Live, on a segment promotion it asks the LLM what the promoted pages say about the user,
embeds the facts, records the answer as a persona-extracted event and folds it; replay
folds those events only. Folding is idempotent: a restated value, a known fact text and
evidence already counted change nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.services.runtime.decisions import DecisionLog, ask
from memoryd.services.runtime.erasure import erase_rows, fold_with_erasures
from memoryd.services.runtime.notify import notification
from memoryd.services.runtime.projection import Effects, Positioned
from memoryd.services.runtime.sharing import interleaved
from memoryd.shared import subjects
from memoryd.shared.adapters.embeddings import Embedder
from memoryd.shared.adapters.llm import LlmFailure, MemoryLlm, OfflineExtractor, PageText
from memoryd.shared.adapters.llm import PersonaExtraction as Extraction
from memoryd.shared.contracts.catalog import AnyEvent
from memoryd.shared.contracts.events import Event, UserErased, derived_id
from memoryd.shared.contracts.memoryos import LearnedFact, PersonaExtracted, SegmentPromoted
from memoryd.shared.domain import lpm
from memoryd.shared.domain.memoryos import MemoryOsParams, decode_vector, encode_vector
from memoryd.shared.stores import persona as store
from memoryd.shared.stores.persona import Persona, UserKey, load_persona


def _facts(learned: Sequence[LearnedFact], event: PersonaExtracted) -> list[lpm.Fact]:
    return [
        lpm.Fact(
            text=fact.text,
            vector=decode_vector(fact.vector),
            at=event.occurred_at,
            source=str(event.event_id),
        )
        for fact in learned
    ]


def fold_extraction(persona: Persona, event: PersonaExtracted, params: MemoryOsParams) -> Persona:
    """Apply an extraction: a changed attribute keeps its old value in the profile history."""
    source = str(event.event_id)
    profile = persona.profile
    stated = {**event.profile, **{f.attribute: f.value for f in event.facts if f.attribute}}
    for attribute, value in sorted(stated.items()):
        profile = lpm.apply_fact(profile, attribute, value, event.occurred_at, source)
    knowledge, _ = lpm.add_facts(
        persona.knowledge, _facts(event.facts, event), capacity=params.knowledge_capacity
    )
    agent, _ = lpm.add_facts(
        persona.agent_traits,
        _facts(event.agent_traits, event),
        capacity=params.agent_traits_capacity,
    )
    traits = lpm.apply_trait_evidence(
        persona.traits, event.traits, at=event.occurred_at, source=source
    )
    return Persona(profile, knowledge, traits, agent)


def learned_facts(
    answer: Extraction, vectors: Sequence[str]
) -> tuple[tuple[LearnedFact, ...], tuple[LearnedFact, ...]]:
    """Pair the answer's facts, then its agent traits, with their encoded vectors, in order."""
    facts = tuple(
        LearnedFact(attribute=f.attribute, value=f.value, text=f.text, vector=v)
        for f, v in zip(answer.facts, vectors[: len(answer.facts)], strict=True)
    )
    agent = tuple(
        LearnedFact(text=text, vector=v)
        for text, v in zip(answer.agent_traits, vectors[len(facts) :], strict=True)
    )
    return facts, agent


def pages_of(promoted: SegmentPromoted) -> list[PageText]:
    """Return the promoted segment's pages as the extractor reads them."""
    return [PageText(query=p.query, response=p.response) for p in promoted.pages]


def fact_texts(answer: Extraction) -> list[str]:
    """Return the texts an answer's facts and agent traits are embedded as, in that order."""
    return [fact.text for fact in answer.facts] + list(answer.agent_traits)


def extraction(
    promoted: SegmentPromoted,
    answer: Extraction,
    facts: tuple[LearnedFact, ...],
    agent: tuple[LearnedFact, ...],
    deciders: tuple[str, str],
) -> PersonaExtracted:
    """Return the decision a promotion led to; ``deciders`` names the embedder and the LLM."""
    return PersonaExtracted(
        event_id=derived_id(promoted.event_id, "persona.extracted"),
        occurred_at=promoted.occurred_at,
        scope=promoted.scope,
        cause_event_id=promoted.event_id,
        segment_id=promoted.segment_id,
        profile=dict(answer.profile),
        facts=facts,
        traits=dict(answer.traits),
        agent_traits=agent,
        turn_ids=tuple(p.turn_id for p in promoted.pages),
        session_ids=tuple(dict.fromkeys(p.session_id for p in promoted.pages if p.session_id)),
        embedder=deciders[0],
        decided_by=deciders[1],
    )


ASKED_HELD = 1_000  # answers asked ahead and not yet taken, at most


class PersonaProjection:
    """Fold promoted segments into each user's long-term persona (MemoryOS LPM)."""

    consumer = subjects.PERSONA_CONSUMER
    folds: frozenset[type[Event]] = frozenset({SegmentPromoted, PersonaExtracted, UserErased})
    decides: frozenset[type[Event]] = frozenset({PersonaExtracted})
    tables = store.TABLES

    def __init__(
        self,
        embedder: Embedder,
        llm: MemoryLlm,
        decisions: DecisionLog,
        params: MemoryOsParams,
    ) -> None:
        self._embedder = embedder
        self._llm = llm
        self._offline = OfflineExtractor()
        self._decisions = decisions
        self._params = params
        # What ``warm`` asked before the transaction, by promotion: taken there once.
        self._asked: dict[uuid.UUID, Extraction | LlmFailure] = {}

    async def warm(self, events: Sequence[AnyEvent]) -> None:
        """Ask about the batch's promotions and embed their facts before the transaction.

        Inside it, the LLM's answer and the model's turn (one call at a time for every
        worker, behind the indexer's batches) held SQLite's one write lock while every
        other projection waited: 11 of the 28 s 3,000 turns took (`bench peers`).
        """
        answers = []
        async for event in interleaved(events):
            if isinstance(event, SegmentPromoted) and event.event_id not in self._asked:
                answer = await self._ask_llm(event)
                self._asked[event.event_id] = answer
                if not isinstance(answer, LlmFailure):
                    answers.append(answer)
        while len(self._asked) > ASKED_HELD:  # promotions whose transaction never came
            del self._asked[next(iter(self._asked))]
        texts = [text for answer in answers for text in fact_texts(answer)]
        if texts:
            await self._embedder.embed(texts)

    async def _ask_llm(self, promoted: SegmentPromoted) -> Extraction | LlmFailure:
        try:
            return await self._llm.extract_persona(pages_of(promoted))
        except LlmFailure as failure:
            return failure

    async def _answer(self, promoted: SegmentPromoted) -> Extraction:
        """Return the LLM's answer on a promotion, asked by ``warm`` or now."""
        answer = self._asked.pop(promoted.event_id, None)
        if answer is None:
            answer = await self._ask_llm(promoted)
        if isinstance(answer, LlmFailure):
            raise answer
        return answer

    async def apply(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Erase the users the batch erases, then fold the rest of it (``_fold_batch``)."""
        return await fold_with_erasures(
            session, batch, live, self._fold_batch, erase_rows(self.tables)
        )

    async def _fold_batch(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Extract on promotions (live) or fold the recorded extractions (replay)."""
        personas: dict[UserKey, Persona] = {}
        extractions: list[PersonaExtracted] = []
        effects = Effects()
        async for item in interleaved(batch):
            extracted = await self._extraction_of(item.event, live)
            if extracted is None:
                continue
            key = (extracted.scope.tenant, extracted.scope.user_id)
            if key not in personas:
                personas[key] = await load_persona(session, key)
            personas[key] = fold_extraction(personas[key], extracted, self._params)
            extractions.append(extracted)
            if live and (extracted.facts or extracted.profile):
                effects.notifications.append(
                    notification("facts.learned", extracted, items=extracted.turn_ids)
                )
        await store.save(session, personas, extractions)
        return effects

    async def _extraction_of(self, event: Event, live: bool) -> PersonaExtracted | None:
        """Decide on a promotion (live), take a recorded extraction (replay); else None."""
        if live and isinstance(event, SegmentPromoted):
            return await self._extract(event)
        if not live and isinstance(event, PersonaExtracted):
            return event
        return None

    async def _extract(self, promoted: SegmentPromoted) -> PersonaExtracted:
        answer: Extraction = await ask(
            "extract_persona",
            promoted,
            lambda: self._answer(promoted),
            lambda: self._offline.extract_persona(pages_of(promoted)),
            self._decisions,
        )
        texts = fact_texts(answer)
        vectors = [encode_vector(row) for row in await self._embedder.embed(texts)] if texts else []
        facts, agent = learned_facts(answer, vectors)
        deciders = (self._embedder.model_name, self._llm.name)
        return await self._decisions.record(extraction(promoted, answer, facts, agent, deciders))
