"""Memory-updated notifications published by the workers after a read model changed."""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict

NotificationKind = Literal[
    "page.added",
    "page.evicted",
    "memory.stored",
    "memory.forgotten",
    "session.cleared",
    # MemoryOS tiers
    "page.filed",
    "segment.promoted",
    "segment.evicted",
    "facts.learned",
    # every projection recall reads has applied the event (a turn, a memory, a forget)
    "recallable",
]


class MemoryUpdated(BaseModel):
    """Something in a user's memory changed, because of the event ``event_id``."""

    model_config = ConfigDict(frozen=True)

    kind: NotificationKind
    tenant: str
    user_id: str
    agent_id: str
    session_id: str | None
    event_id: uuid.UUID
    stream_seq: int
    item_ids: tuple[uuid.UUID, ...] = ()
