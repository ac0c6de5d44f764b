"""Answer list-memories requests: a page of a scope's explicit memories, read-only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import structlog
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.recall.tenancy import tenant_refusal
from memoryd.shared.contracts.errors import describe_validation_error
from memoryd.shared.contracts.memories import (
    ListMemoriesError,
    ListMemoriesErrorCode,
    ListMemoriesRequest,
    MemoryList,
    StoredMemory,
)
from memoryd.shared.stores import memories as memories_store

log = structlog.get_logger(__name__)


def _error(code: ListMemoriesErrorCode, message: str) -> bytes:
    return ListMemoriesError(code=code, message=message).model_dump_json().encode()


@dataclass(frozen=True)
class MemoryListing:
    """List a scope's unexpired explicit memories from the memories read model."""

    sessions: async_sessionmaker[AsyncSession]

    async def handle(self, subject: str, body: bytes) -> bytes:
        """Decode a request received on ``subject``, answer it, and encode the reply."""
        try:
            request = ListMemoriesRequest.model_validate_json(body)
        except ValidationError as error:
            return _error("invalid_request", describe_validation_error(error))
        refusal = tenant_refusal(subject, request.scope.tenant)
        if refusal is not None:
            log.warning("list_memories_refused", subject=subject)
            return _error("forbidden", refusal)
        try:
            answer = await self.answer(request, datetime.now(UTC))
        except Exception:
            log.exception("list_memories_failed", tenant=request.scope.tenant)
            return _error("internal", "listing memories failed; see the service log")
        return answer.model_dump_json().encode()

    async def answer(self, request: ListMemoriesRequest, now: datetime) -> MemoryList:
        """Read one page of the memories the request asks for."""
        async with self.sessions() as session:
            rows, total = await memories_store.listed(session, request, now)
        return MemoryList(memories=[StoredMemory.model_validate(row) for row in rows], total=total)
