"""The STM projection: dialogue pages in a FIFO per conversation; the oldest is evicted."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.services.runtime.erasure import erase_rows, fold_with_erasures
from memoryd.services.runtime.notify import notification
from memoryd.services.runtime.projection import Effects, Positioned
from memoryd.shared import subjects
from memoryd.shared.contracts.events import (
    Event,
    PageEvicted,
    TurnRecorded,
    UserErased,
    derived_id,
)
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.domain.stm import ConversationKey, Page, append_page
from memoryd.shared.stores import stm as store


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


def fold_turns(
    fifos: dict[ConversationKey, tuple[Page, ...]],
    turns: Sequence[tuple[TurnRecorded, int]],
    capacity: int,
    *,
    announce: bool = True,
) -> tuple[Effects, list[uuid.UUID]]:
    """Append each turn's page to its FIFO in ``fifos``; return the effects and evicted ids.

    Without ``announce`` (replay: the evictions are in the log already and nobody is
    notified) no effect is built: a ``PageEvicted`` per evicted page was ~10% of a replay.
    """
    effects = Effects()
    evicted_ids: list[uuid.UUID] = []
    for turn, sequence in turns:
        key = conversation_of(turn)
        page = page_of(turn, sequence)
        if any(held.turn_id == page.turn_id for held in fifos[key]):
            continue  # the same turn published twice beyond the duplicate window
        fifos[key], evicted = append_page(fifos[key], page, capacity)
        if announce:
            effects.extend(appended(key, page, evicted, turn, sequence))
        evicted_ids += [old.turn_id for old in evicted]
    return effects, evicted_ids


def appended(
    key: ConversationKey, page: Page, evicted: Sequence[Page], cause: TurnRecorded, sequence: int
) -> Effects:
    """Return what appending a page announces: the page added, each page evicted (an event)."""
    effects = Effects()
    effects.notifications.append(notification("page.added", cause, sequence, (page.turn_id,)))
    for old in evicted:
        effects.derived.append(eviction_event(key, old, cause))
        effects.notifications.append(notification("page.evicted", cause, sequence, (old.turn_id,)))
    return effects


class StmProjection:
    """Fold turns into per-conversation FIFOs of ``capacity`` pages."""

    consumer = subjects.STM_CONSUMER
    folds: frozenset[type[Event]] = frozenset({TurnRecorded, UserErased})
    decides: frozenset[type[Event]] = frozenset()
    tables = store.TABLES

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity

    async def apply(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Erase the users the batch erases, then fold its turns (``_fold_batch``)."""
        return await fold_with_erasures(
            session, batch, live, self._fold_batch, erase_rows(self.tables)
        )

    async def _fold_batch(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Append each turn's page, evict overflow, and write the difference in bulk."""
        turns = [(p.event, p.sequence) for p in batch if isinstance(p.event, TurnRecorded)]
        if not turns:
            return Effects()
        fifos = await store.load_fifos(session, {conversation_of(t) for t, _ in turns})
        stored = {page.turn_id for fifo in fifos.values() for page in fifo}
        effects, evicted_ids = fold_turns(fifos, turns, self.capacity, announce=live)
        new_rows = [
            store.page_row(key, page)
            for key, fifo in fifos.items()
            for page in fifo
            if page.turn_id not in stored
        ]
        gone = [turn_id for turn_id in evicted_ids if turn_id in stored]
        await store.save(session, gone, new_rows)
        return effects
