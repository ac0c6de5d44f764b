"""`memoryd erase`: a user's right to be forgotten, end to end.

1. Publish ``user.erased.v1`` on the user's subject and wait until every projection has
   applied it: each deletes the user's rows, index points and graph (an event-sourced fold, so
   a replay does the same). A worker that was busy with the user's events when the erasure
   arrived may publish derived events after it (a page eviction, an extraction): those are
   the user's too, so the erasure is published again until the user's subjects end with it.
2. Delete what is keyed by the user's content and lives outside the read models: the embedding
   cache's vectors of the texts the pipeline embedded for them, and the projections' ledger
   rows of their event ids.
3. Purge the user's subjects in the log below the (last) erasure, which stays: the audit
   record, with the tenant, the user and the time, and no content. Then the dead letters whose
   original subject is the user's, and the user's notifications.

The user is not blocked: events published for them later (an app still writing, an old
export imported) are memory again.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog
from nats.js import JetStreamContext
from rich.table import Table

from memoryd.services.bootstrap import open_embedding_store
from memoryd.services.indexer.items import KeyOptions, Upsert, plan
from memoryd.services.mtm.projection import page_text
from memoryd.shared import subjects
from memoryd.shared.adapters.dead_letters import (
    group_dead_letters,
    purge_dead_letters,
    read_dead_letters,
)
from memoryd.shared.adapters.embeddings.cache import content_hash
from memoryd.shared.adapters.nats_log import last_sequence_on, read_subjects
from memoryd.shared.adapters.sql import ledger
from memoryd.shared.adapters.sql.engine import create_engine, session_factory
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope, UserErased
from memoryd.shared.contracts.catalog import AnyEvent, decode_valid
from memoryd.shared.contracts.events import MemoryRemembered, PageEvicted, TurnRecorded
from memoryd.shared.contracts.memoryos import PageFiled, PersonaExtracted
from memoryd.shared.settings import Settings

log = structlog.get_logger(__name__)

# Every key the indexer can make of a turn, whichever the settings chose: deleting the vector
# of a text that was never embedded deletes nothing.
ALL_KEYS = KeyOptions(windows=True, facts=True, agent_facts=True)


class ErasureRefused(Exception):
    """The erasure cannot go on (nothing to erase, or the workers do not apply it): why."""


class AlreadyErased(ErasureRefused):
    """The log holds nothing of the user but an erasure: there is nothing more to erase."""


@dataclass(frozen=True)
class ErasureReport:
    """What an erasure removed, and the audit event that stays in the log."""

    scope: Scope
    audit_event_id: uuid.UUID
    audit_sequence: int
    rounds: int
    events_purged: int
    vectors_deleted: int
    ledger_rows_deleted: int
    dead_letters_deleted: int
    notifications_purged: int


@dataclass(frozen=True)
class Logged:
    """The user's messages in the log: how many, and the events among them that decode."""

    count: int
    events: list[AnyEvent]

    def before(self, event_id: uuid.UUID) -> list[AnyEvent]:
        """Return the events before the event ``event_id`` (all of them if it is absent)."""
        ids = [event.event_id for event in self.events]
        return self.events[: ids.index(event_id) if event_id in ids else len(ids)]


def embedded_texts(events: Iterable[AnyEvent]) -> set[str]:
    """Return every text the pipeline may have embedded for these events (the cache's keys).

    The indexer's keys of turns and memories (every key kind), the MTM's page texts, and the
    facts and agent traits a persona extraction learned.
    """
    events = list(events)
    indexed = [e for e in events if isinstance(e, TurnRecorded | MemoryRemembered)]
    operations, _ = plan(indexed, None, ALL_KEYS)
    texts = {text for op in operations if isinstance(op, Upsert) for text in op.texts()}
    for event in events:
        if isinstance(event, PageEvicted | PageFiled):
            texts.add(page_text(event.query, event.response))
        elif isinstance(event, PersonaExtracted):
            texts.update(fact.text for fact in (*event.facts, *event.agent_traits))
    return texts


def erased_already(logged: Logged) -> datetime | None:
    """Return when the user was erased if the log holds nothing of theirs but that, else None."""
    only_erasures = all(isinstance(event, UserErased) for event in logged.events)
    if logged.count and logged.count == len(logged.events) and only_erasures:
        return logged.events[-1].occurred_at
    return None


def _owner(scope: Scope) -> tuple[str, str]:
    return scope.tenant, scope.user_id


class Erasure:
    """Erase one user through a running memoryd (its workers apply the erasure)."""

    def __init__(
        self, client: MemoryClient, settings: Settings, *, timeout: float, max_rounds: int = 5
    ) -> None:
        self._client = client
        self._js: JetStreamContext = client._js
        self._settings = settings
        self._deadline = time.monotonic() + timeout
        self._max_rounds = max_rounds

    async def erase(self, scope: Scope) -> ErasureReport:
        """Erase the user of ``scope`` (its tenant and user); raise ``ErasureRefused`` if not."""
        logged = await self._logged(scope)
        if logged.count == 0:
            raise ErasureRefused(
                f"tenant {scope.tenant} has no user {scope.user_id} in the log: nothing to erase"
            )
        when = erased_already(logged)
        if when is not None:
            await self._tidy(scope)  # what an interrupted erasure may have left
            raise AlreadyErased(
                f"user {scope.user_id} of tenant {scope.tenant} was erased already "
                f"({when.isoformat()}): nothing more to erase"
            )
        audit, sequence, rounds = await self._fold_everywhere(scope)
        events = (await self._logged(scope)).before(audit.event_id)
        vectors, rows = await self._forget_outside_the_log(events)
        stream, user = self._settings.stream_name, subjects.user_events_filter(*_owner(scope))
        held = await self._held(stream, user)
        await self._js.purge_stream(stream, subject=user, seq=sequence)
        purged = held - await self._held(stream, user)
        letters, notes = await self._tidy(scope)
        log.info("user_erased", tenant=scope.tenant, stream_seq=sequence, events=purged)
        return ErasureReport(
            scope=scope,
            audit_event_id=audit.event_id,
            audit_sequence=sequence,
            rounds=rounds,
            events_purged=purged,
            vectors_deleted=vectors,
            ledger_rows_deleted=rows,
            dead_letters_deleted=letters,
            notifications_purged=notes,
        )

    def _left(self) -> float:
        return max(1.0, self._deadline - time.monotonic())

    async def _logged(self, scope: Scope) -> Logged:
        filters = [subjects.user_events_filter(*_owner(scope))]
        found = await read_subjects(self._js, self._settings.stream_name, filters, self._left())
        return Logged(len(found), decode_valid(found))

    async def _held(self, stream: str, filter_subject: str) -> int:
        """Return how many messages ``stream`` holds on the subjects the filter matches."""
        info = await self._js.stream_info(stream, subjects_filter=filter_subject)
        return sum((info.state.subjects or {}).values())

    async def _fold_everywhere(self, scope: Scope) -> tuple[UserErased, int, int]:
        """Publish the erasure until every projection has applied it and nothing of the user
        follows it in the log; return the last one, its sequence and how many were needed."""
        user = subjects.user_events_filter(*_owner(scope))
        for rounds in range(1, self._max_rounds + 1):
            audit = UserErased(occurred_at=datetime.now(UTC), scope=scope)
            sequence = await self._client.publish(audit)
            try:
                await self._client.wait_until_applied(self._left(), scope=scope)
            except TimeoutError as behind:
                raise ErasureRefused(
                    f"published user.erased.v1 (event {audit.event_id}, stream seq {sequence}) "
                    f"but the workers did not apply it in time ({behind}): nothing is purged "
                    "yet; run `memoryd erase` again once every worker runs"
                ) from None
            if await last_sequence_on(self._js, self._settings.stream_name, user) == sequence:
                return audit, sequence, rounds
            log.info("erasure_again", tenant=scope.tenant, round=rounds, stream_seq=sequence)
        raise ErasureRefused(
            f"events of user {scope.user_id} kept arriving after {self._max_rounds} erasures: "
            "stop what writes for them, then run `memoryd erase` again"
        )

    async def _forget_outside_the_log(self, events: Sequence[AnyEvent]) -> tuple[int, int]:
        """Delete the embedding cache's vectors of the user's texts and their ledger rows."""
        hashes = sorted(content_hash(text) for text in embedded_texts(events))
        async with AsyncExitStack() as exit_stack:
            engine = create_engine(self._settings.resolved_database_url())
            exit_stack.push_async_callback(engine.dispose)
            vectors = await (await open_embedding_store(engine, exit_stack)).forget(hashes)
            async with session_factory(engine)() as session, session.begin():
                rows = await ledger.forget_events(session, (e.event_id for e in events))
        return vectors, rows

    async def _tidy(self, scope: Scope) -> tuple[int, int]:
        """Delete the user's dead letters and notifications; return how many of each."""
        dlq = self._settings.dead_letter_stream
        prefix = subjects.user_events_filter(*_owner(scope)).removesuffix(">")
        groups = group_dead_letters(await read_dead_letters(self._js, dlq, None))
        letters = await purge_dead_letters(
            self._js, dlq, [g for g in groups if g.original_subject.startswith(prefix)]
        )
        notify = subjects.notify_filter(*_owner(scope))
        stream = self._settings.notify_stream_name
        notes = await self._held(stream, notify)
        if notes:
            await self._js.purge_stream(stream, subject=notify)
        return letters, notes


def erasure_table(report: ErasureReport) -> Table:
    """Render what an erasure removed and the audit event that stays."""
    scope = report.scope
    table = Table(title=f"erased user {scope.user_id} of tenant {scope.tenant}")
    table.add_column("what")
    table.add_column("removed", justify="right")
    rows = (
        ("events purged from the log", report.events_purged),
        ("cached vectors of their texts", report.vectors_deleted),
        ("ledger rows of their events", report.ledger_rows_deleted),
        ("dead letters", report.dead_letters_deleted),
        ("notifications", report.notifications_purged),
    )
    for what, count in rows:
        table.add_row(what, f"{count:,}")
    rounds = "" if report.rounds == 1 else f" (published {report.rounds} times: it was busy)"
    table.caption = (
        f"read models, index and graph: cleared by every projection{rounds}; audit event "
        f"{report.audit_event_id} stays at stream seq {report.audit_sequence}"
    )
    return table
