"""Run a projection over batches of log messages: exactly-once effects on at-least-once delivery.

For each batch: decode (bad input goes to the dead-letter stream with its reason), apply the
events the projection has not applied yet and advance its tracking row in ONE transaction,
publish the derived events before that transaction commits (their ids are deterministic, so a
retry is deduplicated by the stream), commit, notify subscribers, and only then ack.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any, Protocol, runtime_checkable

import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from pydantic import ValidationError
from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.runtime.decisions import DecisionsDiverged, pipelined
from memoryd.services.runtime.held import HeldState
from memoryd.shared import subjects
from memoryd.shared.adapters.nats_log import (
    EventPublisher,
    publish_dead_letter,
    read_range,
    subject_of,
)
from memoryd.shared.adapters.nats_notify import NotificationPublisher
from memoryd.shared.adapters.outages import is_outage
from memoryd.shared.adapters.sql import ledger, tracking
from memoryd.shared.contracts.catalog import EVENT_TYPES, AnyEvent, decode_event
from memoryd.shared.contracts.errors import describe_validation_error
from memoryd.shared.contracts.events import Event, UserErased, type_name
from memoryd.shared.contracts.notifications import MemoryUpdated

log = structlog.get_logger(__name__)

# The subject tokens of every event type this version knows.
KNOWN_TOKENS = frozenset(subjects.type_token(type_name(t)) for t in EVENT_TYPES)


@dataclass(frozen=True, slots=True)
class Positioned:
    """An event and the stream sequence it was stored at."""

    event: AnyEvent
    sequence: int


@dataclass(slots=True)
class Effects:
    """What applying a batch produced besides the read-model change."""

    derived: list[Event] = field(default_factory=list)
    notifications: list[MemoryUpdated] = field(default_factory=list)

    def extend(self, other: Effects) -> None:
        """Add ``other``'s effects after these."""
        self.derived.extend(other.derived)
        self.notifications.extend(other.notifications)


class Projection(Protocol):
    """A fold of events into SQL read models.

    ``consumer`` names its durable consumer and tracking row; ``tables`` are the read models
    it alone writes (replay, verify and erasure work on them); ``folds`` are the event types
    it applies: the others only move its position (no ledger row, no call); ``decides`` are
    the folded types it records itself, live, as decisions about a trigger (``decisions``):
    folded at once, at the trigger's place in the log, and skipped when their copy comes back.
    """

    consumer: str
    folds: frozenset[type[Event]]
    decides: frozenset[type[Event]]

    @property
    def tables(self) -> tuple[Table, ...]:
        """Return the read models this projection alone writes."""
        ...

    async def apply(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Apply ``batch`` (in stream order, none applied before) inside ``session``.

        ``live`` is False during replay: then a projection makes no decision (no LLM or
        embedding call, no clock) and folds the derived events already in the log instead.
        """
        ...


@runtime_checkable
class Warms(Protocol):
    """A projection with slow, state-free work (embedding) to do before its transaction."""

    async def warm(self, events: Sequence[AnyEvent]) -> None:
        """Do that work for ``events`` (fill a cache); the transaction then finds it done.

        Outside the transaction, so a slow model does not hold a SQL write lock (SQLite has
        one per file). It changes no read model: a failure here only costs the warm-up.
        """
        ...


@runtime_checkable
class HoldsState(Protocol):
    """A projection that keeps state in memory between its batches (see ``held``)."""

    held: HeldState[Any, Any]


def held_state(projection: Projection) -> HeldState[Any, Any] | None:
    """Return the state ``projection`` (or the projection it is a partition of) holds."""
    inner = projection.projection if isinstance(projection, PartitionOf) else projection
    return inner.held if isinstance(inner, HoldsState) else None


class DeadLetter(Exception):
    """An event that can never be applied, with the reason."""


# The workers of one process read the same log (the embedded default runs them all in one):
# an event several of them fold was validated by each (9.5 decodes a turn, 8.0 shared).
# Events are frozen, so the workers can share one decoded copy.
@lru_cache(maxsize=1_024)
def decode_message(data: bytes, subject: str) -> AnyEvent:
    """Decode one log message, checking it is filed under its own tenant, user and type.

    Decoded once per process while the same bytes under the same subject come again (a
    message that fails is not kept: each reader dead-letters it with the same reason).
    """
    try:
        event = decode_event(data)
    except ValidationError as error:
        raise DeadLetter(f"invalid event: {describe_validation_error(error)}") from error
    expected = subject_of(event)
    if subjects.unpartitioned(subject) != expected:
        raise DeadLetter(f"subject {subject!r} does not match the event (expected {expected!r})")
    return event


Reject = Callable[[int, str], Awaitable[None]]
# A projection's whole ledger, held in memory by a fold that began it empty: event id -> where
# it was first applied. A replay read it back from SQL at every batch: 0.10-0.11 s of a
# 5,700-event replay's 1.4-1.6 s (AVX2), for rows the same replay had just written.
Known = dict[uuid.UUID, ledger.FirstSeen]
# Told after each commit: the consumer, the last sequence handled, the batch's events.
Applied = Callable[[str, int, Sequence[Positioned]], Awaitable[None]]


async def apply_once(
    sessions: async_sessionmaker[AsyncSession],
    projection: Projection,
    batch: Sequence[Positioned],
    publisher: EventPublisher | None,
    *,
    through: int | None = None,
    reject: Reject | None = None,
    known: Known | None = None,
) -> Effects:
    """Apply the not-yet-applied part of ``batch`` and advance tracking in one transaction.

    ``through`` is the last sequence handled (it may be past the last event when trailing
    messages were dead-lettered); it defaults to the last event's sequence. An event whose id
    was applied before (see ``ledger``) is skipped when it is the same event, and handed to
    ``reject`` (sequence, reason) before commit when it is not. Decisions are recorded
    ``pipelined``; when the log kept another copy of one, the batch is rolled back and applied
    again waiting for each decision, so it folds the copies the log holds.

    ``known``: the projection's whole ledger, held by a caller that began it empty (a fold
    into forgotten or new read models, ``replay.fold``): admission reads it instead of SQL,
    and adds what it records to it.
    """
    live = publisher is not None  # replay records no decisions: nothing to pipeline
    apply = partial(
        _apply_once,
        sessions,
        projection,
        batch,
        publisher,
        through=through,
        reject=reject,
        known=known,
    )
    try:
        return await apply(pipelining=live)
    except DecisionsDiverged as diverged:
        log.info("decisions_diverged", consumer=projection.consumer, reason=str(diverged))
        return await apply(pipelining=False)


async def _apply_once(
    sessions: async_sessionmaker[AsyncSession],
    projection: Projection,
    batch: Sequence[Positioned],
    publisher: EventPublisher | None,
    *,
    through: int | None,
    reject: Reject | None,
    known: Known | None,
    pipelining: bool,
) -> Effects:
    last = through if through is not None else (batch[-1].sequence if batch else 0)
    held = held_state(projection)
    async with sessions() as session, session.begin():
        applied = await tracking.position(session, projection.consumer, lock=True)
        if last <= applied:
            return Effects()
        holding = held.begin(projection.consumer, applied) if held is not None else None
        fresh = [i for i in batch if i.sequence > applied and folds_event(projection, i.event)]
        # One ledger per projection, whatever its partitions: an event id is one identity.
        ledger_key = subjects.base_consumer(projection.consumer)
        admitted, recorded = await _admit(session, ledger_key, fresh, reject, known)
        live = publisher is not None
        effects = Effects()
        if admitted:
            async with pipelined() if pipelining else contextlib.nullcontext():
                with held.opened(holding) if held and holding else contextlib.nullcontext():
                    effects = await projection.apply(session, admitted, live)
            await tracking.changed(session, projection.consumer, last, users_changed(admitted))
        if publisher is not None and effects.derived:
            await publisher.publish_many(effects.derived)
        await tracking.advance(session, projection.consumer, last)
    if held is not None and holding is not None:
        held.commit(holding, last)  # committed: what the batch staged is the read models' now
    if known is not None:
        known.update(recorded)  # committed: a batch rolled back and applied again sees none
    return effects


def users_changed(admitted: Sequence[Positioned]) -> dict[str, bool]:
    """Return the owner key of each user a batch's events belong to, and whether the batch
    erased them (holds a ``user.erased`` of theirs)."""
    changed: dict[str, bool] = {}
    for item in admitted:
        key = tracking.owner_key(item.event.scope.tenant, item.event.scope.user_id)
        changed[key] = changed.get(key, False) or isinstance(item.event, UserErased)
    return changed


async def _admit(
    session: AsyncSession,
    consumer: str,
    fresh: list[Positioned],
    reject: Reject | None,
    known: Known | None,
) -> tuple[list[Positioned], Known]:
    """Return the events to apply and their ledger rows; record those, refuse conflicting
    copies. ``known``: the whole ledger, read instead of SQL (``apply_once``)."""
    if known is None:
        ids = (item.event.event_id for item in fresh)
        seen: Mapping[uuid.UUID, ledger.FirstSeen] = await ledger.first_seen(session, consumer, ids)
    else:
        seen = known
    admission = ledger.admit(fresh, seen)
    for item, reason in admission.conflicts:
        if reject is not None:
            await reject(item.sequence, reason)
    if admission.duplicates:
        skipped = [item.sequence for item in admission.duplicates]
        log.info("duplicates_skipped", consumer=consumer, stream_seqs=skipped)
    await ledger.record(session, consumer, admission.new)
    return admission.admitted, admission.new


class PartitionOf:
    """One partition of a projection: its fold, under the partition's consumer and position.

    The read models are the projection's (a user's rows come from one partition only); the
    position, the version readers key on and the consumer are the partition's own.
    """

    def __init__(self, projection: Projection, partition: int, partitions: int) -> None:
        self.projection = projection
        self.partition = partition
        self.partitions = partitions
        self.consumer = subjects.partition_consumer(projection.consumer, partition)
        self.folds = projection.folds
        self.decides = projection.decides

    def users_partition(self, event: Event) -> int:
        """Return the partition ``event``'s user is filed under."""
        return subjects.partition(event.scope.tenant, event.scope.user_id, self.partitions)

    def holds(self, event: Event) -> bool:
        """Return whether ``event`` is filed under this partition (its user's)."""
        return self.users_partition(event) == self.partition

    @property
    def tables(self) -> tuple[Table, ...]:
        """Return the read models the projection alone writes."""
        return self.projection.tables

    async def apply(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Apply a batch of this partition's events with the projection's fold."""
        return await self.projection.apply(session, batch, live)

    async def warm(self, events: Sequence[AnyEvent]) -> None:
        """Do the projection's work before its transaction, if it has any."""
        if isinstance(self.projection, Warms):
            await self.projection.warm(events)


def partitioned(projections: Sequence[Projection], partitions: int) -> list[Projection]:
    """Return the projections as their consumers run them: each one per partition when the
    log is partitioned (the gate reads the whole log, unpartitioned)."""
    running: list[Projection] = []
    for projection in projections:
        if partitions == 1 or not projection.folds:
            running.append(projection)
        else:
            running += [PartitionOf(projection, p, partitions) for p in range(partitions)]
    return running


def folds_event(projection: Projection, event: Event) -> bool:
    """Return whether ``projection`` (or its partition) folds ``event``."""
    if type(event) not in projection.folds:
        return False
    return not isinstance(projection, PartitionOf) or projection.holds(event)


def consumer_filters(projection: Projection) -> list[str]:
    """Return the subjects a projection's consumer reads: the types it folds (the gate: all).

    The server filters, so a worker never receives, decodes or acks the events of the other
    projections (a turn brings ~7 events; most workers fold one or two of them); a
    partition's consumer reads only its partition.
    """
    if projection.consumer == subjects.GATE_CONSUMER:
        return [subjects.ALL_EVENTS]
    partition = projection.partition if isinstance(projection, PartitionOf) else None
    return sorted(subjects.type_filter(type_name(t), partition) for t in projection.folds)


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One message of the log as a worker sees it, delivered or read directly."""

    sequence: int
    subject: str
    data: bytes
    deliveries: int
    msg: Msg | None = None  # None when read directly to fill a gap (nothing to ack)


def entry_of(msg: Msg) -> LogEntry:
    """Wrap a delivered JetStream message."""
    meta = msg.metadata
    return LogEntry(meta.sequence.stream, msg.subject, msg.data, meta.num_delivered or 1, msg)


class ProjectionRunner:
    """Consume log messages for one projection (the thin handler around ``apply_once``).

    The tracking row is the projection's position: the last stream sequence it handled of the
    subjects its consumer reads (``filters``). Messages at or below it are duplicates (acked,
    ignored). Events are applied in log order and never skipped: a batch that continues this
    runner's deliveries (consecutive delivery sequences, each a first delivery) can hide
    nothing before it, since the server delivers new messages in stream order; any other
    batch (the first after a start, a redelivery, a delivery the client lost) is completed
    from the stream: every message on the filters between the position and the batch's end
    that was not delivered is read directly. So is every batch for ``checked_seconds`` after
    the worker is told of a disruption (``check_deliveries``).
    """

    # Seconds before the first retry in place of a failing message; each next one doubles.
    retry_delay = 0.2
    # An outage is retried every ``outage_delay`` seconds for up to ``outage_seconds``.
    outage_delay = 1.0
    outage_seconds = 300.0
    # After a disruption, how long every batch is completed from the stream (see
    # ``check_deliveries``).
    checked_seconds = 30.0

    def __init__(
        self,
        projection: Projection,
        sessions: async_sessionmaker[AsyncSession],
        nc: NatsClient,
        publisher: EventPublisher,
        *,
        notifier: NotificationPublisher,
        stream: str,
        readers: async_sessionmaker[AsyncSession],
        max_attempts: int = 5,
    ) -> None:
        self.projection = projection
        self._sessions = sessions
        self._readers = readers
        self._nc = nc
        self._js = nc.jetstream()
        self._publisher = publisher
        self._notifier = notifier
        self._stream = stream
        self._max_attempts = max_attempts
        self._log = log.bind(consumer=projection.consumer)
        self.listeners: list[Applied] = []
        self.filters = consumer_filters(projection)
        # Type tokens this projection folds; the gate reads the others too and decodes only
        # those no catalogued type names (to park them with the reason).
        self._folded = frozenset(subjects.type_token(type_name(t)) for t in projection.folds)
        # The delivery sequence that would continue the last batch; None until one is done
        # (a start's first batch is completed from the stream: the consumer's state may have
        # passed a message this projection never applied).
        self._next_delivery: int | None = None
        self._checked_until = 0.0  # monotonic time until which continuity is not trusted

    async def handle(self, msgs: Sequence[Msg]) -> None:
        """Process delivered messages in log order; ack them once their effect is durable."""
        continues = self._continues(msgs)
        self._next_delivery = None  # until this batch is done: a failure breaks continuity
        position = await self._position()
        delivered = [entry_of(m) for m in msgs]
        await self._process(await self._ordered_entries(position, delivered, whole=continues))
        for msg in msgs:
            await msg.ack()
        if msgs:
            self._next_delivery = msgs[-1].metadata.sequence.consumer + 1

    def check_deliveries(self) -> None:
        """Complete every batch from the stream for ``checked_seconds`` from now.

        Consecutive delivery sequences hide nothing only while the consumer delivers in
        stream order from a store that holds every message. Around a NATS disruption that
        has failed: after the whole cluster restarted, one turn of 60 was missing from the
        index only (the fault suite), its consumer having passed it over with its delivery
        sequences still consecutive, as a consumer led from a replica still catching up can.
        A worker calls this when a fetch fails, when its consumer's leader moves, and when it
        starts on a replicated stream; the batches then read what the stream's leader holds.
        """
        self._next_delivery = None
        self._checked_until = time.monotonic() + self.checked_seconds

    def _continues(self, msgs: Sequence[Msg]) -> bool:
        """Return whether ``msgs`` are the next first deliveries after this runner's last."""
        expected = self._next_delivery
        if expected is None or time.monotonic() < self._checked_until:
            return False
        sequences = [m.metadata.sequence.consumer for m in msgs]
        first_deliveries = all((m.metadata.num_delivered or 1) == 1 for m in msgs)
        return first_deliveries and sequences == list(range(expected, expected + len(msgs)))

    async def catch_up(self, delivered: int) -> None:
        """Apply, read from the stream, what was delivered up to ``delivered`` but never handed
        to this worker (a message a fetch lost): without it, applied only after ack_wait.

        The copies still unacked on the server come back after ack_wait and are acked then
        as already applied.
        """
        self._next_delivery = None  # a delivery went missing
        position = await self._position()
        if delivered > position:
            await self._process(await self._ordered_entries(position, [], through=delivered))

    async def _position(self) -> int:
        async with self._readers() as session:
            return await tracking.position(session, self.projection.consumer)

    async def _process(self, entries: list[LogEntry]) -> None:
        items: list[tuple[LogEntry, Positioned]] = []
        for entry in entries:
            if not self.decodes(entry.subject):
                continue  # another projection's type: it only moves the position
            try:
                event = self._decode(entry)
            except DeadLetter as reason:
                await self._park(entry, str(reason))
            else:
                items.append((entry, Positioned(event, entry.sequence)))
        if entries:
            await self._warm([item.event for _, item in items])
            await self._apply(items, entries[-1].sequence)
            self._log.debug("applied", first_seq=entries[0].sequence, last_seq=entries[-1].sequence)
            await self._tell(entries[-1].sequence, [item for _, item in items])

    def _decode(self, entry: LogEntry) -> AnyEvent:
        """Decode an entry; one filed under another partition than its user's is refused (a
        publisher that named the partition itself would split the user's order)."""
        event = decode_message(entry.data, entry.subject)
        projection = self.projection
        if isinstance(projection, PartitionOf) and not projection.holds(event):
            raise DeadLetter(
                f"filed under partition {projection.partition}; the user's partition is "
                f"{projection.users_partition(event)}"
            )
        return event

    def decodes(self, subject: str) -> bool:
        """Return whether to decode a message: a type this projection folds, or no known type
        at all (decoding says why it is dead-lettered)."""
        token = subjects.subject_type_token(subject)
        return token in self._folded or token not in KNOWN_TOKENS

    async def _ordered_entries(
        self,
        position: int,
        delivered: list[LogEntry],
        through: int | None = None,
        *,
        whole: bool = False,
    ) -> list[LogEntry]:
        """Return the entries after ``position`` up to the last delivered (or ``through``),
        in order; unless the delivery is known ``whole``, with those not delivered read from
        the stream."""
        by_sequence = {e.sequence: e for e in delivered if e.sequence > position}
        last = max(by_sequence, default=position) if through is None else through
        if last <= position:
            return []
        if not whole:
            # With no position yet this reads from the stream's first message, not from the
            # first one delivered (a redelivered first message may arrive after later ones).
            missing = await self._undelivered(position + 1, last, set(by_sequence))
            by_sequence.update((entry.sequence, entry) for entry in missing)
            if missing:
                self._log.info(
                    "gap_filled",
                    first_seq=missing[0].sequence,
                    last_seq=missing[-1].sequence,
                    count=len(missing),
                )
        return [by_sequence[s] for s in sorted(by_sequence)]

    async def _undelivered(self, first: int, last: int, delivered: set[int]) -> list[LogEntry]:
        """Read from the stream the messages on this runner's filters in ``first..last`` that
        were not delivered, in stream order."""
        found = await read_range(self._js, self._stream, self.filters, first, last)
        return [
            LogEntry(raw.seq, raw.subject or "", raw.data or b"", 1)
            for raw in found
            if raw.seq is not None and raw.seq not in delivered
        ]

    async def _warm(self, events: list[AnyEvent]) -> None:
        if not events or not isinstance(self.projection, Warms):
            return
        try:
            await self.projection.warm(events)
        except Exception:
            # The transaction does the same work again and handles its failure properly.
            self._log.warning("warm_up_failed", size=len(events), exc_info=True)

    async def _apply(self, items: list[tuple[LogEntry, Positioned]], through: int) -> None:
        entries = {entry.sequence: entry for entry, _ in items}

        async def reject(sequence: int, reason: str) -> None:
            await self._park(entries[sequence], reason)

        try:
            effects = await apply_once(
                self._sessions,
                self.projection,
                [p for _, p in items],
                self._publisher,
                through=through,
                reject=reject,
            )
        except Exception:
            self._log.warning("batch_failed_retrying_one_by_one", size=len(items), exc_info=True)
            effects = Effects()
            for entry, item in items:
                effects.extend(await self._apply_single(entry, item))
            await self._advance(through)
        await self._notify(effects.notifications)

    async def _apply_single(self, entry: LogEntry, item: Positioned) -> Effects:
        async def reject(_sequence: int, reason: str) -> None:
            await self._park(entry, reason)

        # Retry in place: nothing later in the log is applied before this one, so order
        # holds; a message that keeps failing is parked with the error as its reason. An
        # outage (NATS or the database away) is no fault of the message: it is retried for
        # as long as it lasts (up to ``outage_seconds``, then left to redelivery), never parked.
        attempts = entry.deliveries
        outage_since: float | None = None
        while True:
            try:
                return await apply_once(
                    self._sessions, self.projection, [item], self._publisher, reject=reject
                )
            except Exception as error:
                outage = is_outage(error)
                self._log.warning(
                    "apply_waiting_for_outage" if outage else "apply_failed",
                    event_id=str(item.event.event_id),
                    subject=entry.subject,
                    stream_seq=entry.sequence,
                    attempt=attempts,
                    exc_info=not outage,
                    error=f"{type(error).__name__}: {error}",
                )
                if outage:
                    outage_since = outage_since or time.monotonic()
                    if time.monotonic() - outage_since > self.outage_seconds:
                        raise
                    await self._hold(entry)
                    await asyncio.sleep(self.outage_delay)
                    continue
                if attempts >= self._max_attempts:
                    await self._park(entry, f"apply failed after {attempts} attempts: {error!r}")
                    await self._advance(entry.sequence)
                    return Effects()
                attempts += 1
                await self._hold(entry)
                await asyncio.sleep(self.retry_delay * 2 ** (attempts - 2))

    async def _hold(self, entry: LogEntry) -> None:
        """Tell the server the message is still being worked on (it is not redelivered)."""
        if entry.msg is not None:
            with contextlib.suppress(Exception):  # the server may be the thing that is away
                await entry.msg.in_progress()

    async def _advance(self, through: int) -> None:
        """Move the position to ``through``, applying nothing (those messages are handled)."""
        await apply_once(self._sessions, self.projection, [], None, through=through)

    async def _park(self, entry: LogEntry, reason: str) -> None:
        self._log.warning(
            "dead_lettered", subject=entry.subject, stream_seq=entry.sequence, reason=reason[:300]
        )
        await publish_dead_letter(
            self._js,
            self.projection.consumer,
            subject=entry.subject,
            sequence=entry.sequence,
            data=entry.data,
            reason=reason,
        )

    async def _tell(self, through: int, batch: list[Positioned]) -> None:
        for listener in self.listeners:
            await listener(self.projection.consumer, through, batch)

    async def _notify(self, notifications: Sequence[MemoryUpdated]) -> None:
        if notifications:
            await self._notifier.publish(notifications)
