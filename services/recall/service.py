"""Answer recall requests: pages, explicit memories, hybrid items and the MemoryOS context."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.recall.admission import Admission, DeadlinePassed
from memoryd.services.recall.cache import ReadCache, VersionFeed, VersionReads, Versions
from memoryd.services.recall.hybrid import HybridRetriever, assemble
from memoryd.services.recall.tenancy import tenant_refusal
from memoryd.services.recall.tiers import TierRecall
from memoryd.services.recall.visits import RecordVisit
from memoryd.services.runtime.operations import RECALL_SECONDS
from memoryd.shared import subjects
from memoryd.shared.contracts.errors import describe_validation_error
from memoryd.shared.contracts.recall import (
    MemoryItem,
    PageItem,
    RecallError,
    RecallErrorCode,
    RecallRequest,
    RecallResponse,
    RetrievedItem,
)
from memoryd.shared.contracts.scope import SearchScope
from memoryd.shared.domain.memories import keyword_score
from memoryd.shared.settings import Settings
from memoryd.shared.stores import memories as memories_store
from memoryd.shared.stores import stm as stm_store
from memoryd.shared.tasks import outcome_read

log = structlog.get_logger(__name__)


def seconds_left(request: RecallRequest, now: datetime) -> float | None:
    """Return the seconds until the request's deadline (None: it set none)."""
    if request.deadline is None:
        return None
    return (request.deadline - now).total_seconds()


def _error(code: RecallErrorCode, message: str) -> tuple[str, bytes]:
    return code, RecallError(code=code, message=message).model_dump_json().encode()


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


@dataclass(frozen=True)
class RecallService:
    """Answer recall requests: read-only, except the one write, which goes through the log.

    The answer is the caller's STM pages, the explicit memories that match (by keyword or by
    the search streams), the hybrid items and the MemoryOS context, assembled within the token
    budget. The segments the tiers used are handed to ``record`` (a ``VisitRecorder``: they
    reach the log as ``segments.visited`` events), so heat is a fold of the log.
    """

    sessions: async_sessionmaker[AsyncSession]
    retriever: HybridRetriever
    tiers: TierRecall
    record: RecordVisit
    admission: Admission = field(default_factory=lambda: Admission.from_settings(Settings()))
    cache: ReadCache = field(default_factory=ReadCache)
    feed: VersionFeed = field(default_factory=VersionFeed)
    versions: VersionReads = field(init=False)

    def __post_init__(self) -> None:
        """Share the versions read among the requests that arrive together."""
        sessions, feed = self.sessions, self.feed
        object.__setattr__(self, "versions", VersionReads(lambda: feed.read(sessions)))

    async def handle(self, subject: str, body: bytes) -> bytes:
        """Decode a request received on ``subject``, answer it, and encode the reply.

        Bad input gets an error reply (``invalid_request``), and so does a request whose
        tenant is not the one its subject names (``forbidden``). Past capacity the reply is
        ``overloaded`` at once; a request whose deadline passes before a worker takes it is
        answered ``deadline_exceeded`` without being worked on. Each is timed by outcome.
        """
        started = time.perf_counter()
        outcome, reply = await self._outcome(subject, body)
        RECALL_SECONDS.labels(outcome).observe(time.perf_counter() - started)
        return reply

    async def _outcome(self, subject: str, body: bytes) -> tuple[str, bytes]:
        try:
            request = RecallRequest.model_validate_json(body)
        except ValidationError as error:
            return _error("invalid_request", describe_validation_error(error))
        refusal = tenant_refusal(subject, request.scope.tenant)
        if refusal is not None:
            log.warning("recall_refused", subject=subject)
            return _error("forbidden", refusal)
        wait = seconds_left(request, datetime.now(UTC))
        if wait is not None and wait <= 0:
            return _error("deadline_exceeded", "the request's deadline passed before it was read")
        if not self.admission.has_room():
            return _error("overloaded", "recall is at capacity; retry later or on a replica")
        try:
            async with self.admission.slot(wait):
                reply = await self.answer(request, datetime.now(UTC))
        except DeadlinePassed:
            return _error("deadline_exceeded", "the request's deadline passed in the queue")
        except Exception:
            log.exception("recall_failed", tenant=request.scope.tenant)
            return _error("internal", "recall failed; see the service log")
        return "ok", reply.model_dump_json().encode()

    async def answer(self, request: RecallRequest, now: datetime) -> RecallResponse:
        """Build the memory context for one request and record the segments it visited.

        The versions of every read model it reads are read first, in one query shared with
        the requests that arrived with it (``VersionReads``): state cached at those versions
        is used without asking SQL again.
        """
        self.retriever.start_query(request)
        at = await self.versions()
        self.cache.settle(at)
        # The tiers' state is read beside the streams (SQL and decoding while the streams wait
        # on the index and the model); the tiers' query is embedded after the streams, not
        # beside them: a query that names a hub is two texts (the dense stream's leaves the
        # name out), and asked at once they would share one padded model call, whose vectors
        # differ from a lone call's in the last bits: enough to move `memoryd bench retrieval`
        # (recall_any@5 0.940 -> 0.937, measured).
        state = asyncio.ensure_future(self.tiers.read_state(self.sessions, request.scope, at))
        try:
            reply = await self._hybrid(request, now, at)
            reply, visited = await self.tiers.enrich(
                self.sessions, request, reply, now, at, state=state
            )
        finally:
            if not state.done():  # the streams failed: nobody awaits the state
                state.cancel()
            state.add_done_callback(outcome_read)
        if visited is not None:
            await self.record(visited)
        return reply

    async def _conversation(
        self, request: RecallRequest, now: datetime, at: Versions
    ) -> tuple[list[PageItem], list[dict[str, Any]]]:
        scope, wide = request.scope, request.search_scope
        # A tenant-wide search reads every user's memories: held until any of them changes.
        # The conversation is always the caller's own.
        user = (scope.tenant, scope.user_id)
        memory_owner = (scope.tenant, None) if wide is SearchScope.GLOBAL else user
        pages: list[PageItem] = []
        if request.include_pages:
            pages = await self.cache.held(
                self.sessions,
                subjects.STM_CONSUMER,
                ("conversation", scope, wide),
                lambda session: stm_store.conversation_pages(session, scope, wide),
                at,
                user=user,
            )
        rows = await self.cache.held(
            self.sessions,
            subjects.MEMORIES_CONSUMER,
            ("memories", scope, wide),
            lambda session: memories_store.in_scope(session, scope, wide),
            at,
            user=memory_owner,
        )
        return pages, memories_store.unexpired(rows, now)

    async def _hybrid(self, request: RecallRequest, now: datetime, at: Versions) -> RecallResponse:
        (pages, rows), (items, sessions) = await asyncio.gather(
            self._conversation(request, now, at), self.retriever.retrieve(request, now, at)
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
