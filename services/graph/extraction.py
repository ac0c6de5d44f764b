"""Decide a graph extraction for one source event and record it as an event (pure + one call).

The extractor (offline rules, or an LLM when configured) is the decision; ``GraphExtracted``
records it, so replay folds the recorded entities and never calls the extractor.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from memoryd.shared.adapters.llm import (
    FALLBACK,
    LlmFailure,
    MemoryLlm,
    OfflineExtractor,
    answer_or_fallback,
)
from memoryd.shared.adapters.llm.port import GraphExtraction
from memoryd.shared.contracts.events import MemoryRemembered, TurnRecorded, derived_id
from memoryd.shared.contracts.memoryos import LlmStepFailed
from memoryd.shared.contracts.retrieval import (
    MAX_GRAPH_ITEMS,
    MAX_NAME_CHARS,
    GraphEntity,
    GraphExtracted,
    GraphRelation,
)
from memoryd.shared.domain.graph import name_key
from memoryd.shared.domain.items import point_id
from memoryd.shared.domain.memories import memory_identity

GraphSource = TurnRecorded | MemoryRemembered


def item_of(event: GraphSource) -> tuple[str, uuid.UUID]:
    """Return the kind and index point id of the item an event creates."""
    if isinstance(event, TurnRecorded):
        return "turn", point_id(event.event_id, "turn", event.scope)
    return "memory", point_id(memory_identity(event), "memory", event.scope)


def merge(first: GraphExtraction, second: GraphExtraction) -> GraphExtraction:
    """Return ``first`` with ``second``'s entities added (its relations are not the user's)."""
    entities = {name_key(e.name): e for e in (*second.entities, *first.entities)}
    return GraphExtraction(entities=tuple(entities.values()), relations=first.relations)


@dataclass(frozen=True, slots=True)
class Extraction:
    """What the extractor found in one source event, and the LLM steps that fell back."""

    found: GraphExtraction
    failures: tuple[tuple[str, LlmFailure], ...] = ()  # (the side read, the failure)


_OFFLINE = OfflineExtractor()


async def _read(llm: MemoryLlm, text: str) -> tuple[GraphExtraction, LlmFailure | None]:
    """Ask the extractor; when an LLM step fails, the offline rules answer instead."""
    return await answer_or_fallback(
        lambda: llm.extract_graph(text), lambda: _OFFLINE.extract_graph(text)
    )


async def extract(llm: MemoryLlm, event: GraphSource) -> Extraction:
    """Ask the extractor: relations from what the user said, entities from every side."""
    if isinstance(event, MemoryRemembered):
        found, failure = await _read(llm, event.content)
        return Extraction(found, (("content", failure),) if failure else ())
    sides = [("query", event.query), ("response", event.response)]
    answers = {side: await _read(llm, text) for side, text in sides if text.strip()}
    failures = tuple((side, failure) for side, (_, failure) in answers.items() if failure)
    said = answers["query"][0] if "query" in answers else GraphExtraction()
    if "response" not in answers:
        return Extraction(said, failures)
    return Extraction(merge(said, answers["response"][0]), failures)


def step_failures(event: GraphSource, extraction: Extraction) -> list[LlmStepFailed]:
    """Record each failed extraction step (id derived from the event and the side read)."""
    return [
        LlmStepFailed(
            event_id=derived_id(event.event_id, f"llm.failed:{failure.step}:{side}"),
            occurred_at=event.occurred_at,
            scope=event.scope,
            cause_event_id=event.event_id,
            step=failure.step,
            reason=failure.reason[:2_000],
            attempts=failure.attempts,
            fallback=FALLBACK,
        )
        for side, failure in extraction.failures
    ]


def _fits(*names: str) -> bool:
    # An extractor can return junk (a base64 blob read as a name): such names are not
    # entities, and keeping them would fail the event's validation and park the turn.
    return all(0 < len(name.strip()) <= MAX_NAME_CHARS for name in names)


def recorded(event: GraphSource, found: GraphExtraction) -> GraphExtracted:
    """Record an extraction as the derived event replay folds (id deterministic).

    Names that are empty or too long are dropped, and at most ``MAX_GRAPH_ITEMS`` entities
    and relations are kept.
    """
    _, item_id = item_of(event)
    entities = [e for e in found.entities if _fits(e.name, e.type)][:MAX_GRAPH_ITEMS]
    relations = [r for r in found.relations if _fits(r.source, r.relation, r.target)][
        :MAX_GRAPH_ITEMS
    ]
    return GraphExtracted(
        event_id=derived_id(event.event_id, "graph.extracted"),
        occurred_at=event.occurred_at,
        scope=event.scope,
        cause_event_id=event.event_id,
        item_id=item_id,
        valid_at=event.occurred_at,
        entities=tuple(GraphEntity(name=e.name, entity_type=e.type) for e in entities),
        relations=tuple(
            GraphRelation(source=r.source, relation=r.relation, target=r.target) for r in relations
        ),
    )
