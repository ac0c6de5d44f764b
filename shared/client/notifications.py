"""Subscriptions to memory-updated notifications: live, or read from the notification stream.

Two forms, one interface (``await updates.get()`` or ``async for note in updates``):

- ``LiveNotifications``: what is published while subscribed (core NATS). It holds at most
  ``max_pending`` notifications the app has not taken yet; past that, new ones are dropped
  and counted in ``dropped``, so a slow app never grows memory without bound.
- ``StreamNotifications``: read from the notification stream through a JetStream consumer
  that delivers into the client's own reply inbox (push delivery), durable (named: it
  resumes where it left off) or not, from a start point. The server hands out at most
  ``max_pending`` notifications that are not acknowledged yet (``max_ack_pending``) and
  sends more only as they are acknowledged: memory stays bounded however far behind the app
  is, and nothing is dropped. Delivering into the inbox (rather than letting the client pull)
  is what keeps tenants apart: a tenant's credentials read only its own inboxes, so knowing
  another tenant's consumer name gives nothing to read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import Literal, Protocol

import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError
from pydantic import ValidationError

from memoryd.shared.contracts.errors import describe_validation_error
from memoryd.shared.contracts.notifications import MemoryUpdated, parse_notification

# Where a subscription starts: "new" (only what is published from now), "all" (everything the
# stream still holds), a notification stream sequence (int), or a time (aware datetime).
Start = Literal["new", "all"] | int | datetime

# How long one wait for a delivery lasts before waiting again (it returns at once on one).
FETCH_WAIT_SECONDS = 5.0
# How often, and how far apart, a closing durable subscription asks the server whether it
# has settled (see ``StreamNotifications.close``), and how many "unbound" answers in a row.
UNBIND_CHECKS = 50
UNBIND_PAUSE_SECONDS = 0.01
UNBOUND_CONFIRMATIONS = 2
log = structlog.get_logger(__name__)


def readable(data: bytes, sequence: int | None = None) -> MemoryUpdated | None:
    """Return the notification ``data`` holds, or None (logged) when this SDK cannot read it.

    A kind or version newer than this SDK, or a message that is no notification at all, is
    skipped rather than raised: one unreadable message must not stop a subscriber.
    """
    try:
        return parse_notification(data)
    except ValidationError as unreadable:
        log.warning(
            "notification_skipped",
            stream_seq=sequence,
            reason=describe_validation_error(unreadable),
        )
        return None


# An unnamed stream subscription's consumer is removed this long after its client went away.
EPHEMERAL_INACTIVE_SECONDS = 60.0


def check_durable(existing: api.ConsumerConfig, wanted: api.ConsumerConfig) -> None:
    """Refuse to resume a durable consumer that follows other subjects than asked for."""
    if existing.filter_subject != wanted.filter_subject:
        raise ValueError(
            f"durable {wanted.durable_name!r} follows {existing.filter_subject!r}, not "
            f"{wanted.filter_subject!r}: use another name for another tenant or user"
        )


def consumer_config(
    filter_subject: str,
    start: Start,
    *,
    durable: str | None,
    max_pending: int,
    ack_wait: float,
) -> api.ConsumerConfig:
    """Describe the pull consumer of a stream subscription starting at ``start``.

    ``max_pending`` bounds the notifications handed out and not yet acknowledged, which also
    keeps them in order after a subscriber dies holding some (the next one gets them first).
    """
    config = api.ConsumerConfig(
        durable_name=durable,
        filter_subject=filter_subject,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=ack_wait,
        max_ack_pending=max_pending,
        inactive_threshold=None if durable else EPHEMERAL_INACTIVE_SECONDS,
    )
    if start == "new":
        config.deliver_policy = api.DeliverPolicy.NEW
    elif start == "all":
        config.deliver_policy = api.DeliverPolicy.ALL
    elif isinstance(start, datetime):
        if start.tzinfo is None:
            raise ValueError("a start time must carry a timezone")
        config.deliver_policy = api.DeliverPolicy.BY_START_TIME
        config.opt_start_time = start
    elif isinstance(start, int) and start >= 1:
        config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = start
    else:
        raise ValueError(f"start must be 'new', 'all', a sequence >= 1 or a time, not {start!r}")
    return config


class Notifications(Protocol):
    """A subscription's notifications: ``await get()`` or ``async for``.

    ``skipped`` counts the messages this SDK could not read (a newer kind or version): they
    are logged and passed over, never handed out.
    """

    sequence: int | None
    skipped: int

    async def get(self) -> MemoryUpdated:
        """Return the next notification, waiting for one."""
        ...

    def held(self) -> int:
        """Return how many notifications are held for the app, not taken yet."""
        ...

    def __aiter__(self) -> Notifications: ...

    async def __anext__(self) -> MemoryUpdated: ...


class LiveNotifications:
    """Notifications published while subscribed, at most ``max_pending`` held for the app."""

    def __init__(self, max_pending: int) -> None:
        self._queue: asyncio.Queue[MemoryUpdated] = asyncio.Queue(maxsize=max_pending)
        self.dropped = 0  # notifications that arrived while ``max_pending`` were held
        self.skipped = 0
        self.sequence: int | None = None  # live notifications carry no stream sequence

    def deliver(self, data: bytes) -> None:
        """Hold a notification for the app, or count it dropped when the app is too far behind."""
        note = readable(data)
        if note is None:
            self.skipped += 1
            return
        try:
            self._queue.put_nowait(note)
        except asyncio.QueueFull:
            self.dropped += 1

    async def get(self) -> MemoryUpdated:
        """Return the next notification, waiting for one."""
        return await self._queue.get()

    def held(self) -> int:
        """Return how many notifications are held for the app, not taken yet."""
        return self._queue.qsize()

    def __aiter__(self) -> LiveNotifications:
        return self

    async def __anext__(self) -> MemoryUpdated:
        return await self.get()


class StreamNotifications:
    """Notifications read from the notification stream, in stream order, acknowledged as taken.

    A notification is acknowledged when the app asks for the next one, or when the
    subscription closes without an error: one the app was handling when it failed is
    delivered again. ``sequence`` is the notification stream sequence of the last one taken
    (a later subscription can start after it).
    """

    def __init__(self, subscription: JetStreamContext.PushSubscription, max_pending: int) -> None:
        self._subscription = subscription
        self._max_pending = max_pending
        self._buffer: deque[Msg] = deque()
        self._in_hand: Msg | None = None
        self.sequence: int | None = None
        self.skipped = 0

    async def get(self) -> MemoryUpdated:
        """Acknowledge the notification taken before; return the next one, waiting for it.

        A message this SDK cannot read is terminated (never delivered again) and skipped.
        """
        await self._acknowledge_in_hand()
        while True:
            while not self._buffer:
                self._buffer.extend(await self._fetch())
            msg = self._buffer.popleft()
            note = readable(msg.data, msg.metadata.sequence.stream)
            if note is not None:
                break
            self.skipped += 1
            await msg.term()
        self._in_hand = msg
        self.sequence = msg.metadata.sequence.stream
        return note

    def held(self) -> int:
        """Return how many notifications are delivered and held for the app, not taken yet."""
        return len(self._buffer) + self._subscription.pending_msgs

    async def close(self, *, completed: bool, resumable: bool = True) -> None:
        """End delivery; acknowledge the last one taken when the app ``completed`` it; hand back
        the rest.

        The rest (the one taken when the app failed, and those fetched and never taken) are
        released at once, in order, so the next subscriber on the consumer gets them first
        instead of after the acknowledgement wait. The server learns a moment late that the
        inbox lost its subscriber, and a message it sends meanwhile (handed back, or made room
        for by an acknowledgement) goes nowhere and waits out the acknowledgement wait: for a
        ``resumable`` (durable) consumer, close first waits until everything sent is here, and
        after unsubscribing, until the server says twice running that the consumer is unbound
        (once was not enough: 1 loss in 300). An unnamed consumer is deleted after: no waits.
        """
        if resumable:
            await self._until(lambda info: (info.num_ack_pending or 0) <= self._here())
        await self._stop_delivery()
        if resumable:
            await self._until(lambda info: not info.push_bound, UNBOUND_CONFIRMATIONS)
        if completed:
            await self._acknowledge_in_hand()
        elif self._in_hand is not None:
            self._buffer.appendleft(self._in_hand)
            self._in_hand = None
        for msg in self._buffer:
            await msg.nak()
        self._buffer.clear()

    def _here(self) -> int:
        """Return how many delivered messages this subscription holds, taken or not."""
        return self.held() + (self._in_hand is not None)

    async def _until(self, settled: Callable[[api.ConsumerInfo], bool], running: int = 1) -> None:
        """Ask the consumer's info until ``settled`` holds ``running`` times in a row (at most
        ``UNBIND_CHECKS`` asks, ~0.5 s); a consumer deleted meanwhile has nothing to wait for."""
        held = 0
        with contextlib.suppress(NotFoundError):
            for _ in range(UNBIND_CHECKS):
                held = held + 1 if settled(await self._subscription.consumer_info()) else 0
                if held == running:
                    return
                await asyncio.sleep(UNBIND_PAUSE_SECONDS)

    async def _stop_delivery(self) -> None:
        """Unsubscribe the inbox, keeping every message the server sent into it before."""
        drained = asyncio.ensure_future(self._subscription.drain())  # type: ignore[no-untyped-call]
        while not drained.done():  # the drain waits for its delivered messages to be taken
            with contextlib.suppress(TimeoutError):
                self._buffer.append(await self._subscription.next_msg(timeout=0.05))
        await drained

    async def _acknowledge_in_hand(self) -> None:
        if self._in_hand is not None:
            await self._in_hand.ack_sync()
            self._in_hand = None

    async def _fetch(self) -> list[Msg]:
        try:
            return [await self._subscription.next_msg(timeout=FETCH_WAIT_SECONDS)]
        except TimeoutError:  # nats-py raises the built-in one or its own subclass
            return []

    def __aiter__(self) -> StreamNotifications:
        return self

    async def __anext__(self) -> MemoryUpdated:
        return await self.get()
