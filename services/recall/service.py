"""Answer recall requests: the caller's pages and the matching explicit memories."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import structlog
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.recall.hybrid import HybridRetriever, assemble
from memoryd.services.recall.tiers import TierRecall
from memoryd.shared.contracts.events import Event
from memoryd.shared.contracts.recall import (
    MemoryItem,
    PageItem,
    RecallError,
    RecallRequest,
    RecallResponse,
    RetrievedItem,
)
from memoryd.shared.contracts.retrieval import MemoriesRecalled
from memoryd.shared.domain.memories import keyword_score
from memoryd.shared.domain.text import estimate_tokens
from memoryd.shared.stores import memories as memories_store
from memoryd.shared.stores import stm as stm_store

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
    sessions: async_sessionmaker[AsyncSession],
    request: RecallRequest,
    now: datetime,
    retriever: HybridRetriever | None = None,
) -> RecallResponse:
    """Build the memory context for one request (with hybrid items when a retriever is set)."""
    if retriever is not None:
        return await _hybrid_recall(sessions, request, now, retriever)
    async with sessions() as session:
        pages = (
            await stm_store.conversation_pages(session, request.scope, request.search_scope)
            if request.include_pages
            else []
        )
        rows = await memories_store.visible(session, request.scope, request.search_scope, now)
    ranked = rank_memories(request.query, rows, request.limit)
    context, pages, ranked, tokens = render_context(pages, ranked, request.max_tokens)
    return RecallResponse(pages=pages, memories=ranked, context=context, tokens=tokens)


# --- hybrid retrieval ---------------------------------------------------------------
def with_found_memories(
    ranked: Sequence[MemoryItem],
    rows: Sequence[Mapping[str, Any]],
    items: Sequence[RetrievedItem],
    limit: int,
) -> tuple[list[MemoryItem], list[RetrievedItem]]:
    """Add the memories hybrid retrieval found to the keyword-ranked ones (at most ``limit``).

    The SQL rows are the truth: a memory item whose row is gone (forgotten, expired, or not
    yet applied by the memories projection) is dropped from the items, so recall never shows
    a memory the read model does not hold. Return the memories and the items to assemble.
    """
    by_id = {str(row["memory_id"]): row for row in rows}
    memories = list(ranked)
    listed = {str(m.memory_id) for m in memories}
    for item in items:
        if item.kind != "memory" or item.memory_id in listed or item.memory_id not in by_id:
            continue
        memories.append(MemoryItem.model_validate({**by_id[item.memory_id], "score": item.score}))
        listed.add(item.memory_id)
    memories = memories[:limit]
    kept = {str(m.memory_id) for m in memories}
    return memories, [i for i in items if i.kind != "memory" or i.memory_id in kept]


RecordVisit = Callable[[Event], Awaitable[object]]


async def _hybrid_recall(
    sessions: async_sessionmaker[AsyncSession],
    request: RecallRequest,
    now: datetime,
    retriever: HybridRetriever,
) -> RecallResponse:
    async def conversation() -> tuple[list[PageItem], list[dict[str, Any]]]:
        async with sessions() as session:
            pages = (
                await stm_store.conversation_pages(session, request.scope, request.search_scope)
                if request.include_pages
                else []
            )
            rows = await memories_store.visible(session, request.scope, request.search_scope, now)
        return pages, rows

    (pages, rows), (items, sessions) = await asyncio.gather(
        conversation(), retriever.retrieve(request, now)
    )
    ranked = rank_memories(request.query, rows, request.limit)
    found, items = with_found_memories(ranked, rows, items, request.limit)
    context, pages, found, items, tokens = assemble(pages, found, items, request.max_tokens)
    return RecallResponse(
        pages=pages,
        memories=found,
        context=context,
        tokens=tokens,
        items=items,
        sessions=sessions,
    )


def visit_of(request: RecallRequest, response: RecallResponse, now: datetime) -> Event | None:
    """Return the event recording which indexed items a recall returned (None: none)."""
    ids = tuple(item.item_id for item in response.items)
    if not ids:
        return None
    return MemoriesRecalled(occurred_at=now, scope=request.scope, item_ids=ids)


async def handle_recall(
    sessions: async_sessionmaker[AsyncSession],
    body: bytes,
    retriever: HybridRetriever | None = None,
    record_visit: RecordVisit | None = None,
    tiers: TierRecall | None = None,  # the MemoryOS context
) -> bytes:
    """Decode a request, answer it, and encode the reply (an error reply for bad input).

    With ``record_visit``, the items returned are recorded as a ``memories.recalled`` event
    (the service's one write), so access counts are a fold of the log too.
    """
    try:
        request = RecallRequest.model_validate_json(body)
    except ValidationError as error:
        reply: RecallResponse | RecallError = RecallError(
            code="invalid_request", message=str(error)
        )
    else:
        try:
            now = datetime.now(UTC)
            reply = await recall(sessions, request, now, retriever)
            visit = visit_of(request, reply, now) if record_visit is not None else None
            if visit is not None and record_visit is not None:
                await record_visit(visit)
            # --- add the MemoryOS tiers; record the segments used (their heat) ---
            if tiers is not None:
                reply, segments_visit = await tiers.enrich(sessions, request, reply, now)
                if segments_visit is not None and record_visit is not None:
                    await record_visit(segments_visit)
        except Exception:
            log.exception("recall_failed", tenant=request.scope.tenant)
            reply = RecallError(code="internal", message="recall failed; see the service log")
    return reply.model_dump_json().encode()
