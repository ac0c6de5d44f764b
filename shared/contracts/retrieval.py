"""Events of hybrid retrieval: recall visits, retention expiry, and graph extractions.

Each records a decision taken once, live (a recall happened, a clock said a memory expired, an
extractor read entities out of a text), so replay folds the same state without deciding again.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from memoryd.shared.contracts.events import Event

MAX_RECALLED_ITEMS = 200
MAX_GRAPH_ITEMS = 200
MAX_NAME_CHARS = 200
Name = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_NAME_CHARS)
]


class MemoriesRecalled(Event):
    """A recall returned these indexed items (their access count and time go up)."""

    type: Literal["memories.recalled.v1"] = "memories.recalled.v1"
    item_ids: tuple[uuid.UUID, ...] = Field(min_length=1, max_length=MAX_RECALLED_ITEMS)


class MemoryExpired(Event):
    """A daily memory outlived its time to live (decided by the retention sweep's clock)."""

    type: Literal["memory.expired.v1"] = "memory.expired.v1"
    memory_id: uuid.UUID
    # The memory.remembered event of the version that expired (a later update lives on).
    source_event_id: uuid.UUID
    expires_at: datetime


class GraphEntity(BaseModel):
    """A node: a named thing and its type."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Name
    entity_type: Name = "thing"


class GraphRelation(BaseModel):
    """An edge: ``source`` relates to ``target`` as ``relation``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: Name
    relation: Name
    target: Name


class GraphExtracted(Event):
    """Entities and relations an extractor read from one source event (derived, once)."""

    type: Literal["graph.extracted.v1"] = "graph.extracted.v1"
    cause_event_id: uuid.UUID
    item_id: uuid.UUID
    valid_at: datetime
    entities: tuple[GraphEntity, ...] = Field(default=(), max_length=MAX_GRAPH_ITEMS)
    relations: tuple[GraphRelation, ...] = Field(default=(), max_length=MAX_GRAPH_ITEMS)
