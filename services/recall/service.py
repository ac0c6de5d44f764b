"""Answer recall requests: the caller's pages and the matching explicit memories."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import structlog
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.recall import queries
from memoryd.shared.contracts.recall import (
    MemoryItem,
    PageItem,
    RecallError,
    RecallRequest,
    RecallResponse,
)
from memoryd.shared.domain.memories import keyword_score
from memoryd.shared.domain.text import estimate_tokens

log = structlog.get_logger(__name__)


def rank_memories(query: str, rows: Sequence[Mapping[str, Any]], limit: int) -> list[MemoryItem]:
    """Score memory rows against ``query`` and keep the best ``limit`` that match at all."""
    scored = []
    for row in rows:
        text = f"{row['key'] or ''} {row['content']}"
        score = keyword_score(query, text, float(row["importance"]))
        if score > 0:
            scored.append(MemoryItem.model_validate({**row, "score": round(score, 6)}))
    scored.sort(key=lambda item: (-item.score, -item.created_at.timestamp(), str(item.memory_id)))
    return scored[:limit]


def render_context(
    pages: Sequence[PageItem], memories: Sequence[MemoryItem], max_tokens: int
) -> tuple[str, list[PageItem], list[MemoryItem], int]:
    """Assemble the prompt block within ``max_tokens``: the conversation first, then memories.

    The newest pages are kept when the budget is short; memories are kept best first.
    """
    used = 0
    kept_pages: list[PageItem] = []
    for page in reversed(pages):
        cost = estimate_tokens(f"User: {page.query}\nAgent: {page.response}\n")
        if used + cost > max_tokens:
            break
        kept_pages.insert(0, page)
        used += cost
    kept_memories: list[MemoryItem] = []
    for memory in memories:
        cost = estimate_tokens(f"- {memory.content}\n")
        if used + cost > max_tokens:
            break
        kept_memories.append(memory)
        used += cost
    lines: list[str] = []
    if kept_pages:
        lines.append("## Recent conversation")
        for page in kept_pages:
            lines += [f"User: {page.query}", f"Agent: {page.response}"]
    if kept_memories:
        lines.append("## Memories")
        lines += [f"- {memory.content}" for memory in kept_memories]
    return "\n".join(lines), kept_pages, kept_memories, used


async def recall(
    sessions: async_sessionmaker[AsyncSession], request: RecallRequest, now: datetime
) -> RecallResponse:
    """Build the memory context for one request."""
    async with sessions() as session:
        pages = (
            await queries.conversation_pages(session, request.scope, request.search_scope)
            if request.include_pages
            else []
        )
        rows = await queries.candidate_memories(session, request.scope, request.search_scope, now)
    ranked = rank_memories(request.query, rows, request.limit)
    context, pages, ranked, tokens = render_context(pages, ranked, request.max_tokens)
    return RecallResponse(pages=pages, memories=ranked, context=context, tokens=tokens)


async def handle_recall(sessions: async_sessionmaker[AsyncSession], body: bytes) -> bytes:
    """Decode a request, answer it, and encode the reply (an error reply for bad input)."""
    try:
        request = RecallRequest.model_validate_json(body)
    except ValidationError as error:
        reply: RecallResponse | RecallError = RecallError(
            code="invalid_request", message=str(error)
        )
    else:
        try:
            reply = await recall(sessions, request, datetime.now(UTC))
        except Exception:
            log.exception("recall_failed", tenant=request.scope.tenant)
            reply = RecallError(code="internal", message="recall failed; see the service log")
    return reply.model_dump_json().encode()
