"""Rebuild every SQL read model by folding the log again, with no side effects.

Replay applies, for each projection, exactly the events its live consumer had acknowledged
(its ack floor): derived events for those were published live and are in the log already,
so replay publishes nothing and notifies no one. Events past the ack floor are left to the
live consumer, which will apply them (and publish their derived events) when it resumes.
A projection's own decisions are the exception that proves the rule: live, it folded each
one with its trigger, so replay folds it there too, wherever its copy lies (``placed``).
Run it while the workers are stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError
from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from memoryd.services.runtime import heap
from memoryd.services.runtime.projection import (
    DeadLetter,
    Known,
    Positioned,
    Projection,
    apply_once,
    decode_message,
    folds_event,
)
from memoryd.shared import subjects
from memoryd.shared.adapters.nats_log import last_sequence, next_on
from memoryd.shared.adapters.sql import ledger, tracking
from memoryd.shared.adapters.sql.schema import create_schema, read_model_checksums
from memoryd.shared.adapters.sql.tables import metadata
from memoryd.shared.contracts.catalog import event_type_name

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ReplayReport:
    """What a replay did and how fast."""

    events: int
    events_by_type: Counter[str]
    seconds: float
    targets: dict[str, int]
    checksums: dict[str, str]
    folds: dict[str, float] = field(default_factory=dict)  # seconds per projection

    @property
    def events_per_second(self) -> float:
        """Return the replay throughput."""
        return self.events / self.seconds if self.seconds else 0.0


# Told (consumer, events folded, events to fold) as a replay goes.
Progress = Callable[[str, int, int], None]

# Events a replayed projection folds per transaction. A batch loads and writes back the state
# of every user it touches (STM's FIFOs, the graph's nodes), so larger batches do that less
# often: 5,000 against 1,000 took STM's fold of 2,000 turns over 100 users 0.18-0.20 ->
# 0.11-0.12 s, a replay of 5,700 events ~10% faster (scratch harness, alternating runs).
REPLAY_BATCH = 5_000


async def acked_position(js: JetStreamContext, stream: str, consumer: str) -> int:
    """Return the stream sequence a live consumer has acknowledged up to (0 if none)."""
    try:
        info = await js.consumer_info(stream, consumer)
    except NotFoundError:
        return 0
    return info.ack_floor.stream_seq if info.ack_floor and info.ack_floor.stream_seq else 0


async def read_log(
    js: JetStreamContext, stream: str, until: int, patience: float = 120.0
) -> list[tuple[bytes, str, int]]:
    """Read (data, subject, sequence) of every event up to sequence ``until``.

    An ordered push consumer delivers the log in order (it recreates itself past a gap, a
    reconnect or a leader change); a pull consumer's ``fetch`` waited on a timer per message,
    ~3x the time (4,400 events: 0.17 -> 0.06 s). It reads until ``until`` or the end of the
    log; with nothing delivered for ``patience`` seconds while some is left, ``TimeoutError``:
    a replay never goes on with part of the log.
    """
    if until == 0:
        return []
    reader = _LogReader(js, stream, until)
    sub = await js.subscribe(
        subjects.ALL_EVENTS,
        stream=stream,
        cb=reader.take,
        ordered_consumer=True,
        config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL),
    )
    try:
        await reader.finished(sub, patience)
    finally:
        await sub.unsubscribe()
    return reader.events


class _LogReader:
    """The events a consumer delivers up to a sequence, and when it has delivered them."""

    def __init__(self, js: JetStreamContext, stream: str, until: int) -> None:
        self._js = js
        self._stream = stream
        self.until = until
        self.events: list[tuple[bytes, str, int]] = []
        self.last_seen = 0  # the last stream sequence delivered, past ``until`` too
        self.done = False  # ``until`` or past it delivered
        self.idle = False  # the consumer said nothing was pending, before ``until``
        self._woken = asyncio.Event()

    async def take(self, msg: Msg) -> None:
        """Keep a delivered event; done at ``until``, idle when the consumer has no more."""
        meta = msg.metadata
        sequence = self.last_seen = meta.sequence.stream
        if sequence <= self.until:
            self.events.append((msg.data, msg.subject, sequence))
        if sequence >= self.until:
            self.done = True
        elif not meta.num_pending:
            self.idle = True
        else:
            return
        self._woken.set()

    async def finished(self, sub: JetStreamContext.PushSubscription, patience: float) -> None:
        """Return once done, or once nothing is left before ``until`` (a log purged through
        it): the consumer says it has nothing more and the stream's leader agrees.
        ``TimeoutError`` after ``patience`` seconds without a new event.

        The consumer reads the replica of the node it is placed on; a replica still catching
        up after a restart says nothing is pending before it has every event (a replay
        folded part of the log so, measured on a cluster). The leader is asked for the next
        event after the last one delivered: up to ``until``, the reader waits for it.
        """
        seen, quiet_since = self.last_seen, time.monotonic()
        while not self.done:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), timeout=1.0)
            self._woken.clear()
            if self.done:
                return
            if self.last_seen != seen:
                seen, quiet_since = self.last_seen, time.monotonic()
            idle, self.idle = self.idle or await self._drained(sub), False
            if idle and not await self._more_before_until():
                return
            if time.monotonic() - quiet_since > patience:
                raise TimeoutError(f"the log could not be read through {self.until}")

    async def _drained(self, sub: JetStreamContext.PushSubscription) -> bool:
        """Return whether everything the consumer delivered was taken and nothing is left
        (False while unknown: NATS away)."""
        try:
            info = await sub.consumer_info()
        except Exception:  # NATS away or the consumer being recreated: ask again later
            return False
        delivered = info.delivered
        nothing_untaken = (
            delivered is None
            or not delivered.consumer_seq  # this consumer delivered nothing yet
            or (delivered.stream_seq or 0) <= self.last_seen
        )
        return not info.num_pending and nothing_untaken

    async def _more_before_until(self) -> bool:
        """Return whether the stream's leader holds an event after the last one delivered,
        up to ``until`` (True while unknown: NATS away)."""
        try:
            following = await next_on(
                self._js, self._stream, subjects.ALL_EVENTS, self.last_seen + 1
            )
        except Exception:
            return True
        return following is not None and (following.seq or 0) <= self.until


def decode_log(raw: Sequence[tuple[bytes, str, int]]) -> list[Positioned]:
    """Decode the log, skipping what was dead-lettered live (it never reached a model)."""
    events = []
    for data, subject, sequence in raw:
        try:
            events.append(Positioned(decode_message(data, subject), sequence))
        except DeadLetter:
            continue
    return events


def owned_tables(projections: Sequence[Projection]) -> list[Table]:
    """Return the read models the projections write, in creation order."""
    owned = {table for projection in projections for table in projection.tables}
    return [table for table in metadata.sorted_tables if table in owned]


async def drop_owned(
    engine: AsyncEngine,
    sessions: async_sessionmaker[AsyncSession],
    projections: Sequence[Projection],
) -> None:
    """Drop the read models of ``projections`` and forget their positions; keep every other.

    A projection that is not replayed keeps its tables, tracking row and ledger: its state
    stays consistent with its position.
    """
    tables = owned_tables(projections)
    async with engine.begin() as conn:
        await conn.run_sync(lambda sync: metadata.drop_all(sync, tables=tables))
    await create_schema(engine)
    consumers = [projection.consumer for projection in projections]
    ledgers = list(dict.fromkeys(subjects.base_consumer(c) for c in consumers))
    async with sessions() as session, session.begin():
        await tracking.forget(session, consumers)
        await ledger.forget_consumers(session, ledgers)


def placed(projection: Projection, events: Sequence[Positioned], target: int) -> list[Positioned]:
    """Return what ``projection`` folds of ``events`` up to ``target``, in the order it
    folded them live.

    Live, a worker folds a decision of its own (``projection.decides``) the moment it makes
    it, with its trigger, and skips the copy when it comes back through the log, as late as
    the worker's lag. So a decision stands at its trigger's sequence here (a decision about a
    decision at the first trigger's): it folds right after the trigger, and up to ``target``
    exactly when its trigger does, however far past ``target`` its copy lies. A decision
    whose trigger is not in ``events`` stays where its copy is.
    """
    folded = [item for item in events if folds_event(projection, item.event)]
    if not projection.decides:
        return [item for item in folded if item.sequence <= target]
    at: dict[uuid.UUID, int] = {}
    mine: list[Positioned] = []
    for item in folded:
        event, sequence = item.event, item.sequence
        if type(event) in projection.decides:
            cause: uuid.UUID | None = getattr(event, "cause_event_id", None)
            sequence = at.get(cause, sequence) if cause is not None else sequence
        at[event.event_id] = sequence
        if sequence <= target:
            mine.append(item if sequence == item.sequence else Positioned(event, sequence))
    return sorted(mine, key=lambda item: item.sequence)  # stable: a trigger before its decisions


def batches(items: Sequence[Positioned], size: int) -> Iterator[Sequence[Positioned]]:
    """Split ``items`` into batches of about ``size``, never between two items of one
    sequence (a trigger and its decisions): the next batch would take them as applied."""
    start = 0
    while start < len(items):
        end = min(start + size, len(items))
        while end < len(items) and items[end].sequence == items[end - 1].sequence:
            end += 1
        yield items[start:end]
        start = end


async def log_to_fold(
    js: JetStreamContext, stream: str, targets: dict[str, int]
) -> list[Positioned]:
    """Return the decoded log a fold up to ``targets`` needs: all of it (a decision folded
    with its trigger may lie past every target, ``placed``), or none when no target is set."""
    until = await last_sequence(js, stream) if any(targets.values()) else 0
    return decode_log(await read_log(js, stream, until))


async def fold(
    sessions: async_sessionmaker[AsyncSession],
    projections: Sequence[Projection],
    events: Sequence[Positioned],
    targets: dict[str, int],
    *,
    batch_size: int = REPLAY_BATCH,
    progress: Progress | None = None,
) -> dict[str, float]:
    """Fold ``events`` into each projection up to its target sequence, publishing nothing.

    ``events`` run to the end of the log: a decision folded with its trigger may lie past the
    target (``placed``). ``progress(consumer, folded, total)`` is told after each batch.
    Return the seconds each projection took.

    The projections' ledgers start empty (a replay forgot them, a verification's scratch is
    new), so each is held in memory while its projections fold (``Known``), not read back.
    """
    seconds: dict[str, float] = {}
    ledgers = [subjects.base_consumer(projection.consumer) for projection in projections]
    last_use = {key: at for at, key in enumerate(ledgers)}  # a projection's partitions share one
    held: dict[str, Known] = {}
    for at, projection in enumerate(projections):
        started = time.perf_counter()
        target = targets[projection.consumer]
        mine = placed(projection, events, target)
        if progress is not None:
            progress(projection.consumer, 0, len(mine))
        folded = 0
        known = held.setdefault(ledgers[at], {})
        for batch in batches(mine, batch_size):
            await apply_once(sessions, projection, batch, None, known=known)
            folded += len(batch)
            if progress is not None:
                progress(projection.consumer, folded, len(mine))
        if target:  # a projection that never read an event has no position, live or replayed
            async with sessions() as session, session.begin():
                await tracking.advance(session, projection.consumer, target)
        if last_use[ledgers[at]] == at:
            del held[ledgers[at]]  # a long log's ledger is ~250 bytes an event: not kept past use
        seconds[projection.consumer] = round(time.perf_counter() - started, 3)
    return seconds


async def replay(
    js: JetStreamContext,
    stream: str,
    engine: AsyncEngine,
    sessions: async_sessionmaker[AsyncSession],
    projections: Sequence[Projection],
    *,
    batch_size: int = REPLAY_BATCH,
    progress: Progress | None = None,
) -> ReplayReport:
    """Drop the projections' read models and fold the log into them again; return the report.

    ``progress`` is told how far each projection's fold has come (see ``fold``).
    """
    targets = {p.consumer: await acked_position(js, stream, p.consumer) for p in projections}
    started = time.perf_counter()
    with heap.folding() as freeze:
        events = await log_to_fold(js, stream, targets)
        freeze()  # the decoded log lives to the end: no collector pass walks it again
        await drop_owned(engine, sessions, projections)
        folded = await fold(
            sessions, projections, events, targets, batch_size=batch_size, progress=progress
        )
    seconds = time.perf_counter() - started
    checksums = await read_model_checksums(engine, owned_tables(projections))
    log.info(
        "replayed", events=len(events), seconds=round(seconds, 3), targets=targets, folds=folded
    )
    by_type = Counter(event_type_name(item.event) for item in events)
    return ReplayReport(len(events), by_type, seconds, targets, checksums, folded)
