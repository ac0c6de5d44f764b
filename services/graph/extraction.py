"""Decide a graph extraction for one source event and record it as an event.

The extractor (offline rules, or an LLM when configured) is the decision; ``GraphExtracted``
records it through the decision log, so replay folds the recorded entities and never calls
the extractor. A failed LLM step falls back to the offline rules, recorded by ``ask``.
"""

from __future__ import annotations

import uuid

from memoryd.services.runtime.decisions import DecisionLog, ask
from memoryd.shared.adapters.llm import MemoryLlm, OfflineExtractor
from memoryd.shared.adapters.llm.port import GraphExtraction
from memoryd.shared.contracts.events import MemoryRemembered, TurnRecorded, derived_id
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


_OFFLINE = OfflineExtractor()


async def _read(
    llm: MemoryLlm, decisions: DecisionLog, event: GraphSource, side: str, text: str
) -> GraphExtraction:
    """Ask the extractor to read one side; when the LLM step fails, the offline rules do."""
    return await ask(
        "extract_graph",
        event,
        lambda: llm.extract_graph(text),
        lambda: _OFFLINE.extract_graph(text),
        decisions,
        part=side,
    )


async def extract(llm: MemoryLlm, decisions: DecisionLog, event: GraphSource) -> GraphExtraction:
    """Ask the extractor: relations from what the user said, entities from every side."""
    if isinstance(event, MemoryRemembered):
        return await _read(llm, decisions, event, "content", event.content)
    sides = [("query", event.query), ("response", event.response)]
    answers = {
        side: await _read(llm, decisions, event, side, text) for side, text in sides if text.strip()
    }
    said = answers.get("query", GraphExtraction())
    if "response" not in answers:
        return said
    return merge(said, answers["response"])


async def decide(llm: MemoryLlm, decisions: DecisionLog, event: GraphSource) -> GraphExtracted:
    """Extract a source event's graph and record it; return the copy the log holds."""
    return await decisions.record(recorded(event, await extract(llm, decisions, event)))


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
