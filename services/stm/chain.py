"""The STM meta chain: each new page's continuity verdict and its chain's summary.

Every turn becomes a chain row (a pure fold, live and in replay); live, the worker then asks
the LLM whether the page continues the previous one and summarises the chain of linked
pages, records that as a page-chained event and folds it. Replay folds those events. Rows
are kept for the last ``capacity`` pages of each conversation, like the STM FIFO.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.services.runtime.decisions import DecisionLog, ask
from memoryd.services.runtime.erasure import erase_rows, fold_with_erasures
from memoryd.services.runtime.projection import Effects, Positioned
from memoryd.services.runtime.sharing import interleaved
from memoryd.services.stm.projection import conversation_of
from memoryd.shared import subjects
from memoryd.shared.adapters.llm import MemoryLlm, OfflineExtractor, PageText
from memoryd.shared.contracts.events import Event, TurnRecorded, UserErased, derived_id
from memoryd.shared.contracts.memoryos import PageChained
from memoryd.shared.domain.stm import ConversationKey
from memoryd.shared.stores import chain as store


def chain_row(turn: TurnRecorded, sequence: int) -> dict[str, Any]:
    """Return the chain row a turn starts as (not linked, no summary yet)."""
    return {
        "turn_id": turn.event_id,
        "tenant": turn.scope.tenant,
        "user_id": turn.scope.user_id,
        "agent_id": turn.scope.agent_id,
        "query": turn.query,
        "response": turn.response,
        "linked": False,
        "meta_chain": "",
        "stream_seq": sequence,
    }


def row_page(row: Mapping[str, Any]) -> PageText:
    """Return a chain row's page as the LLM reads it."""
    return PageText(query=row["query"], response=row["response"])


def chain_pages(rows: Sequence[dict[str, Any]], linked: bool) -> list[PageText]:
    """Return the pages of the newest row's chain: it and the linked rows before it."""
    if not linked:
        return [row_page(rows[-1])]
    start = len(rows) - 2
    while start > 0 and rows[start]["linked"]:
        start -= 1
    return [row_page(row) for row in rows[max(start, 0) :]]


def previous_page(rows: Sequence[dict[str, Any]]) -> PageText | None:
    """Return the page before the newest row's (None: the newest is the first)."""
    if len(rows) < 2:
        return None
    return row_page(rows[-2])


def chained(turn: TurnRecorded, linked: bool, summary: str, decided_by: str) -> PageChained:
    """Return the decision on a turn's page: whether it continues the chain, and its summary."""
    return PageChained(
        event_id=derived_id(turn.event_id, "page.chained"),
        occurred_at=turn.occurred_at,
        scope=turn.scope,
        turn_id=turn.event_id,
        linked=linked,
        meta_chain=summary,
        decided_by=decided_by,
    )


@dataclass
class ChainBatch:
    """The chain rows of the conversations a batch touches, oldest first."""

    session: AsyncSession
    capacity: int
    rows: dict[ConversationKey, list[dict[str, Any]]] = field(default_factory=dict)
    stored: set[uuid.UUID] = field(default_factory=set)

    async def conversation(self, key: ConversationKey) -> list[dict[str, Any]]:
        """Return a conversation's rows, loading them on first use."""
        if key not in self.rows:
            self.rows[key] = await store.conversation(self.session, key)
            self.stored.update(row["turn_id"] for row in self.rows[key])
        return self.rows[key]

    async def write(self) -> None:
        """Write new and changed rows; drop rows beyond capacity."""
        kept: list[dict[str, Any]] = []
        for key, rows in self.rows.items():
            self.rows[key] = rows[-self.capacity :]
            kept.extend(self.rows[key])
        gone = self.stored - {row["turn_id"] for row in kept}
        fresh = [
            {name: value for name, value in row.items() if name != "changed"}
            for row in kept
            if row["turn_id"] not in self.stored
        ]
        changed = [row for row in kept if row["turn_id"] in self.stored and row.get("changed")]
        await store.save(self.session, gone, fresh, changed)


def fold_turn(rows: list[dict[str, Any]], turn: TurnRecorded, sequence: int) -> bool:
    """Append the turn's row unless it is there already; return whether it was added."""
    if any(row["turn_id"] == turn.event_id for row in rows):
        return False
    rows.append(chain_row(turn, sequence))
    return True


def fold_chained(rows: list[dict[str, Any]], chained: PageChained) -> None:
    """Set the verdict and summary on the page's row (gone already: nothing to do)."""
    for row in reversed(rows):  # the page decided is nearly always the newest; ids are unique
        if row["turn_id"] == chained.turn_id:
            row.update(linked=chained.linked, meta_chain=chained.meta_chain)
            row["changed"] = True
            return


class ChainProjection:
    """Keep the continuity verdict and chain summary of each conversation's recent pages."""

    consumer = subjects.CHAIN_CONSUMER
    folds: frozenset[type[Event]] = frozenset({TurnRecorded, PageChained, UserErased})
    decides: frozenset[type[Event]] = frozenset({PageChained})
    tables = store.TABLES

    def __init__(self, llm: MemoryLlm, decisions: DecisionLog, capacity: int) -> None:
        self._llm = llm
        self._offline = OfflineExtractor()
        self._decisions = decisions
        self._capacity = capacity

    async def apply(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Erase the users the batch erases, then fold the rest of it (``_fold_batch``)."""
        return await fold_with_erasures(
            session, batch, live, self._fold_batch, erase_rows(self.tables)
        )

    async def _fold_batch(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Fold turns; decide continuity and summary (live) or fold the decisions (replay)."""
        state = ChainBatch(session, self._capacity)
        async for item in interleaved(batch):
            event = item.event
            if isinstance(event, TurnRecorded):
                rows = await state.conversation(conversation_of(event))
                if fold_turn(rows, event, item.sequence) and live:
                    fold_chained(rows, await self._decide(rows, event))
            elif not live and isinstance(event, PageChained):
                key = ConversationKey(event.scope.tenant, event.scope.user_id, event.scope.agent_id)
                fold_chained(await state.conversation(key), event)
        await state.write()
        return Effects()

    async def _decide(self, rows: list[dict[str, Any]], turn: TurnRecorded) -> PageChained:
        page = PageText(query=turn.query, response=turn.response)
        previous = previous_page(rows)
        verdict = await ask(
            "check_continuity",
            turn,
            lambda: self._llm.check_continuity(previous, page),
            lambda: self._offline.check_continuity(previous, page),
            self._decisions,
        )
        linked = verdict.linked and previous is not None
        pages = chain_pages(rows, linked)
        summary = await ask(
            "summarise_chain",
            turn,
            lambda: self._llm.summarise_chain(pages),
            lambda: self._offline.summarise_chain(pages),
            self._decisions,
        )
        return await self._decisions.record(chained(turn, linked, summary, self._llm.name))
