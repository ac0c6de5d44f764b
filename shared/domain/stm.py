"""Short-term memory: a FIFO of dialogue pages per conversation (pure)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class ConversationKey:
    """One conversation: a user talking to an agent inside a tenant."""

    tenant: str
    user_id: str
    agent_id: str


@dataclass(frozen=True, slots=True)
class Page:
    """A dialogue page: one user query and the agent's response."""

    turn_id: uuid.UUID
    session_id: str | None
    namespace: str
    query: str
    response: str
    occurred_at: datetime
    stream_seq: int


def append_page(
    fifo: tuple[Page, ...], page: Page, capacity: int
) -> tuple[tuple[Page, ...], tuple[Page, ...]]:
    """Append ``page``; return the new FIFO and the pages evicted from its front, oldest first."""
    pages = (*fifo, page)
    overflow = max(0, len(pages) - capacity)
    return pages[overflow:], pages[:overflow]
