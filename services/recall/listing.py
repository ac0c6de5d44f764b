"""Answer list-memories requests: a page of a scope's explicit memories, read-only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.recall.rpc import reply
from memoryd.shared.contracts.memories import (
    ListMemoriesError,
    ListMemoriesErrorCode,
    ListMemoriesRequest,
    MemoryList,
    StoredMemory,
)
from memoryd.shared.stores import memories as memories_store


def _error(code: ListMemoriesErrorCode, message: str) -> ListMemoriesError:
    return ListMemoriesError(code=code, message=message)


@dataclass(frozen=True)
class MemoryListing:
    """List a scope's unexpired explicit memories from the memories read model."""

    sessions: async_sessionmaker[AsyncSession]

    async def handle(self, subject: str, body: bytes) -> bytes:
        """Decode a request received on ``subject``, answer it, and encode the reply."""
        return await reply(subject, body, ListMemoriesRequest, self.answer, _error)

    async def answer(self, request: ListMemoriesRequest, now: datetime) -> MemoryList:
        """Read one page of the memories the request asks for."""
        async with self.sessions() as session:
            rows, total = await memories_store.listed(session, request, now)
        return MemoryList(memories=[StoredMemory.model_validate(row) for row in rows], total=total)
