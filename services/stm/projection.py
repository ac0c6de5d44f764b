"""The STM projection: dialogue pages in a FIFO per conversation; the oldest is evicted."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from sqlalchemy import and_, delete, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.services.runtime.notify import notification
from memoryd.services.runtime.projection import Effects, Positioned
from memoryd.shared import subjects
from memoryd.shared.adapters.sql.tables import stm_pages
from memoryd.shared.contracts.events import PageEvicted, TurnRecorded, derived_id
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.domain.stm import ConversationKey, Page, append_page


def conversation_of(turn: TurnRecorded) -> ConversationKey:
    """Return the conversation a turn belongs to."""
    return ConversationKey(turn.scope.tenant, turn.scope.user_id, turn.scope.agent_id)


def page_of(turn: TurnRecorded, sequence: int) -> Page:
    """Return the dialogue page a turn becomes."""
    return Page(
        turn_id=turn.event_id,
        session_id=turn.scope.session_id,
        namespace=turn.scope.namespace,
        query=turn.query,
        response=turn.response,
        occurred_at=turn.occurred_at,
        stream_seq=sequence,
    )


def eviction_event(key: ConversationKey, page: Page, cause: TurnRecorded) -> PageEvicted:
    """Describe the eviction of ``page`` caused by ``cause`` (a deterministic derived event)."""
    return PageEvicted(
        event_id=derived_id(page.turn_id, "page.evicted"),
        occurred_at=cause.occurred_at,
        scope=Scope(
            tenant=key.tenant,
            user_id=key.user_id,
            agent_id=key.agent_id,
            session_id=page.session_id,
            namespace=page.namespace,
        ),
        cause_event_id=cause.event_id,
        turn_id=page.turn_id,
        query=page.query,
        response=page.response,
        turn_occurred_at=page.occurred_at,
    )


def _row(key: ConversationKey, page: Page) -> dict[str, object]:
    return {
        "turn_id": page.turn_id,
        "tenant": key.tenant,
        "user_id": key.user_id,
        "agent_id": key.agent_id,
        "session_id": page.session_id,
        "namespace": page.namespace,
        "query": page.query,
        "response": page.response,
        "occurred_at": page.occurred_at,
        "stream_seq": page.stream_seq,
    }


def _page_from_row(row: object) -> Page:
    mapping = row._mapping  # type: ignore[attr-defined]
    return Page(
        turn_id=mapping["turn_id"],
        session_id=mapping["session_id"],
        namespace=mapping["namespace"],
        query=mapping["query"],
        response=mapping["response"],
        occurred_at=mapping["occurred_at"],
        stream_seq=mapping["stream_seq"],
    )


async def load_fifos(
    session: AsyncSession, keys: Iterable[ConversationKey]
) -> dict[ConversationKey, tuple[Page, ...]]:
    """Load the current FIFO of each conversation in ``keys``, oldest page first."""
    keys = list(keys)
    fifos: dict[ConversationKey, list[Page]] = defaultdict(list)
    for start in range(0, len(keys), 200):
        chunk = keys[start : start + 200]
        condition = or_(
            *(
                and_(
                    stm_pages.c.tenant == k.tenant,
                    stm_pages.c.user_id == k.user_id,
                    stm_pages.c.agent_id == k.agent_id,
                )
                for k in chunk
            )
        )
        rows = await session.execute(
            select(stm_pages).where(condition).order_by(stm_pages.c.stream_seq)
        )
        for row in rows:
            m = row._mapping
            fifos[ConversationKey(m["tenant"], m["user_id"], m["agent_id"])].append(
                _page_from_row(row)
            )
    return {key: tuple(fifos.get(key, ())) for key in keys}


class StmProjection:
    """Fold turns into per-conversation FIFOs of ``capacity`` pages."""

    consumer = subjects.STM_CONSUMER
    tables = (stm_pages,)

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity

    async def apply(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Append each turn's page, evict overflow, and write the difference in bulk."""
        turns = [(p.event, p.sequence) for p in batch if isinstance(p.event, TurnRecorded)]
        if not turns:
            return Effects()
        fifos = await load_fifos(session, {conversation_of(t) for t, _ in turns})
        stored = {page.turn_id for fifo in fifos.values() for page in fifo}
        effects = Effects()
        evicted_ids: list[object] = []
        for turn, sequence in turns:
            key = conversation_of(turn)
            page = page_of(turn, sequence)
            if any(held.turn_id == page.turn_id for held in fifos[key]):
                continue  # the same turn published twice beyond the duplicate window
            fifos[key], evicted = append_page(fifos[key], page, self.capacity)
            effects.notifications.append(
                notification("page.added", turn, sequence, (page.turn_id,))
            )
            for old in evicted:
                evicted_ids.append(old.turn_id)
                effects.derived.append(eviction_event(key, old, turn))
                effects.notifications.append(
                    notification("page.evicted", turn, sequence, (old.turn_id,))
                )
        new_rows = [
            _row(key, page)
            for key, fifo in fifos.items()
            for page in fifo
            if page.turn_id not in stored
        ]
        gone = [turn_id for turn_id in evicted_ids if turn_id in stored]
        if gone:
            await session.execute(delete(stm_pages).where(stm_pages.c.turn_id.in_(gone)))
        if new_rows:
            await session.execute(stm_pages.insert(), new_rows)
        return effects
