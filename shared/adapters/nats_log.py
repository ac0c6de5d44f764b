"""The event log on NATS JetStream: streams, publishing, dead letters, settling."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError
from pydantic import SecretStr

from memoryd.shared import subjects
from memoryd.shared.contracts.catalog import encode_event, event_type_name
from memoryd.shared.contracts.events import Event
from memoryd.shared.logging import REDACTOR
from memoryd.shared.settings import Settings, StartupError, public_url, revealed
from memoryd.shared.tasks import cancelled

MSG_ID = "Nats-Msg-Id"
DEFAULT_CONNECT_TIMEOUT = 10.0

log = structlog.get_logger(__name__)


class NatsUnavailable(StartupError, ConnectionError):
    """No NATS server answered at the URL in time."""


class NatsRefused(NatsUnavailable):
    """The NATS server answered but refused the credentials."""


def subject_of(event: Event) -> str:
    """Return the subject an event is published on (its scope and its type)."""
    return subjects.event_subject(event.scope, event_type_name(event))


def msg_id(event: Event) -> dict[str, str]:
    """Return the headers that make the stream store an event once: its id as Nats-Msg-Id."""
    return {MSG_ID: str(event.event_id)}


def server_list(url: str) -> list[str]:
    """Split a comma-separated NATS URL list (a cluster's seed servers)."""
    return [part.strip() for part in url.split(",") if part.strip()]


@dataclass(frozen=True)
class NatsAuth:
    """Who a connection is: a NATS user and its password; for a tenant's app, the tenant.

    A tenant's connection takes its reply inboxes under the tenant's own prefix
    (``_INBOX_<tenant>``), the only inboxes its credentials may read. No user: no credentials
    (the embedded default's open server).
    """

    user: str | None = None
    password: SecretStr | None = None
    tenant: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> NatsAuth:
        """Return the credentials the settings name (MEMORYD_NATS_USER, _PASSWORD, _TENANT)."""
        return cls(settings.nats_user, settings.nats_password, settings.nats_tenant)

    def options(self) -> dict[str, Any]:
        """Return the nats-py connect options these credentials set."""
        options: dict[str, Any] = {}
        if self.user is not None:
            options["user"] = self.user
            options["password"] = revealed(self.password) or ""
        if self.tenant is not None:
            options["inbox_prefix"] = subjects.inbox_prefix(self.tenant)
        return options

    def servers(self, url: str) -> list[str]:
        """Return the servers of ``url`` carrying the user and password (for FastStream)."""
        if self.user is None:
            return server_list(url)
        userinfo = f"{quote(self.user, safe='')}:{quote(revealed(self.password) or '', safe='')}"
        return [
            urlunsplit(split._replace(netloc=f"{userinfo}@{split.hostname}:{split.port or 4222}"))
            for split in (urlsplit(server) for server in server_list(url))
        ]


async def connect(
    url: str,
    name: str = "memoryd",
    timeout: float = DEFAULT_CONNECT_TIMEOUT,
    auth: NatsAuth | None = None,
) -> NatsClient:
    """Connect to NATS, retrying while a just-started server comes up, for ``timeout`` seconds.

    Raises ``NatsUnavailable`` (one line naming the URL and MEMORYD_NATS_URL) when no server
    answered in time, or ``NatsRefused`` when the server refused the credentials. Once
    connected, the client reconnects for ever.
    """
    nc = NatsClient()
    errors: list[Exception] = []
    attempt = nc.connect(
        server_list(url),
        name=name,
        connect_timeout=max(1, min(2, int(timeout))),
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,  # type: ignore[arg-type]  # typed int, used as seconds
        error_cb=_error_logger(nc, url, errors),
        **(auth or NatsAuth()).options(),
    )
    if not await finished_within(asyncio.ensure_future(attempt), timeout):
        with contextlib.suppress(Exception):
            await nc.close()
        if any(_refused(error) for error in errors):
            raise NatsRefused(
                f"the NATS server at {public_url(url)} refused this process's credentials: "
                "set MEMORYD_NATS_USER and MEMORYD_NATS_PASSWORD to ones `memoryd tenants` made"
            ) from None
        raise NatsUnavailable(
            f"no NATS server answered at {public_url(url)} within {timeout:g}s: start memoryd "
            "(`memoryd up`) or set MEMORYD_NATS_URL to a running NATS server "
            "(MEMORYD_CONNECT_TIMEOUT_SECONDS to wait longer)"
        ) from None
    return nc


async def finished_within(task: asyncio.Future[Any], timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``task``: True when it ended (its error raised), else
    cancel it until it has ended and return False.

    Not ``asyncio.wait_for``: before Python 3.12 a cancellation that lands as the task's own
    inner wait completes is lost (CPython gh-86296), and wait_for then waits for a task that
    goes on. nats-py's connect retries for ever and waits on its replies that way: under load,
    `memoryd dead-letters` with a refused password ran past 120 s instead of ending at 10.
    """
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except BaseException:
        await cancelled(task)
        raise
    if task in done:
        task.result()
        return True
    await cancelled(task)
    return False


def _refused(error: Exception) -> bool:
    text = str(error).lower()
    return isinstance(error, nats.errors.AuthorizationError) or "authorization" in text


def _error_logger(
    nc: NatsClient, url: str, errors: list[Exception]
) -> Callable[[Exception], Awaitable[None]]:
    """Return the client's error callback: one log line, a warning once it was connected."""

    async def log_error(error: Exception) -> None:
        # nats-py's default logs a traceback per failed attempt (two a second while NATS is
        # away). Before the first connection the one-line NatsUnavailable says it all.
        if not nc.is_connected:
            del errors[:-8]
            errors.append(error)
        report = log.warning if nc.is_connected or nc.is_reconnecting else log.debug
        report(
            "nats_error",
            url=public_url(url),
            error=f"{type(error).__name__}: {error}".strip(": "),
        )

    return log_error


def event_stream_config(settings: Settings) -> api.StreamConfig:
    """Describe the stream that holds every event: the source of truth."""
    return api.StreamConfig(
        name=settings.stream_name,
        subjects=[subjects.ALL_EVENTS],
        storage=api.StorageType.FILE,
        retention=api.RetentionPolicy.LIMITS,
        duplicate_window=settings.duplicate_window_seconds,
        num_replicas=settings.stream_replicas,
        subject_transform=partition_transform(settings.partitions),
    )


def partition_transform(partitions: int) -> api.SubjectTransform | None:
    """Return the transform that files each event under its user's partition (None: one)."""
    if partitions == 1:
        return None
    return api.SubjectTransform(
        src=subjects.PARTITIONED_SOURCE, dest=subjects.partition_destination(partitions)
    )


def _partitions_of(destination: str | None) -> int:
    """Return the partition count a transform destination names (1: none)."""
    if destination is None:
        return 1
    return int(destination.split("partition(")[1].split(",")[0])


def stream_partitions(info: api.StreamInfo) -> int:
    """Return how many partitions a stream's events are filed under (1: not partitioned)."""
    transform = info.config.subject_transform
    return _partitions_of(transform.dest if transform else None)


class PartitionsChanged(StartupError):
    """The log was made with another number of partitions than the settings name."""


def check_partitions(info: api.StreamInfo, config: api.StreamConfig) -> None:
    """Refuse a log partitioned otherwise than ``config``: a user's events would change
    partition midway."""
    found, wanted = info.config.subject_transform, config.subject_transform
    made, asked = (t.dest if t else None for t in (found, wanted))
    if made != asked:
        raise PartitionsChanged(
            f"the stream {info.config.name} was made with {_partitions_of(made)} partition(s); "
            f"MEMORYD_PARTITIONS asks for {_partitions_of(asked)}: set it back, or start a "
            "new log and import an export into it"
        )


def dead_letter_stream_config(settings: Settings) -> api.StreamConfig:
    """Describe the stream that parks messages a worker could not process."""
    return api.StreamConfig(
        name=settings.dead_letter_stream,
        subjects=[subjects.ALL_DEAD_LETTERS],
        storage=api.StorageType.FILE,
        duplicate_window=settings.duplicate_window_seconds,
        num_replicas=settings.stream_replicas,
    )


def notification_stream_config(settings: Settings) -> api.StreamConfig:
    """Describe the stream that keeps memory-updated notifications for durable subscribers.

    It captures what the workers publish on the notify subjects (live subscribers get the same
    messages), keeps them ``notify_max_age_seconds`` and up to ``notify_max_bytes``, dropping
    the oldest first, and drops a notification published twice (same Nats-Msg-Id).
    """
    return api.StreamConfig(
        name=settings.notify_stream_name,
        subjects=[subjects.ALL_NOTIFICATIONS],
        storage=api.StorageType.FILE,
        retention=api.RetentionPolicy.LIMITS,
        discard=api.DiscardPolicy.OLD,
        max_age=settings.notify_max_age_seconds,
        max_bytes=settings.notify_max_bytes,
        duplicate_window=min(settings.duplicate_window_seconds, settings.notify_max_age_seconds),
        num_replicas=settings.stream_replicas,
    )


async def ensure_streams(js: JetStreamContext, settings: Settings, patience: float = 60.0) -> None:
    """Create the event, dead-letter and notification streams, or bring their config up to date.

    A cluster that has just started may not answer JetStream requests until it has elected
    its leaders: asked again for up to ``patience`` seconds.
    """
    configs = (
        event_stream_config(settings),
        dead_letter_stream_config(settings),
        notification_stream_config(settings),
    )
    deadline = time.monotonic() + patience
    for config in configs:
        while True:
            try:
                await _ensure_stream(js, config)
                break
            except _AMBIGUOUS:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)


async def _ensure_stream(js: JetStreamContext, config: api.StreamConfig) -> None:
    try:
        check_partitions(await js.stream_info(config.name or ""), config)
    except NotFoundError:
        try:
            await js.add_stream(config)
        except nats.js.errors.BadRequestError:
            await js.update_stream(config)  # another process created it meanwhile
    else:
        await js.update_stream(config)


# What a publish whose answer may simply have been lost raises: no acknowledgement in time
# (the server restarting, the client reconnecting), or no stream listening yet (JetStream
# still recovering after a restart). Sending again with the same Nats-Msg-Id is safe.
_AMBIGUOUS = (
    TimeoutError,
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
)


class PublishFailed(TimeoutError):
    """No acknowledgement for an event after every attempt; the event may or may not be stored.

    Publishing it again with the same event id is safe: the stream stores it once.
    """


class PayloadTooLarge(ValueError):
    """A message is larger than the NATS server accepts (its ``max_payload``); nothing was sent."""


def check_size(message: Outgoing, max_payload: int) -> None:
    """Raise ``PayloadTooLarge`` when ``message`` (data and headers) exceeds ``max_payload``."""
    size = len(message.data) + sum(len(k) + len(v) + 4 for k, v in message.headers.items())
    if size > max_payload:
        raise PayloadTooLarge(
            f"message {message.headers.get(MSG_ID)} on {message.subject} is {size:,} bytes; "
            f"the NATS server accepts at most {max_payload:,} (its max_payload): shorten "
            "its text or metadata; nothing was published"
        )


def _max_payload(js: JetStreamContext) -> int:
    nc: NatsClient = js._nc
    return int(nc.max_payload)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message for a stream: its subject, bytes and headers (a Nats-Msg-Id among them)."""

    subject: str
    data: bytes
    headers: dict[str, str]


class StreamPublisher:
    """Publish messages to one stream; each carries a Nats-Msg-Id, so a resend is stored once.

    A publish whose acknowledgement does not come (NATS restarting, a reconnect) is sent
    again until the stream answers: ``attempts`` sends at most, for ``total_timeout`` seconds
    at most, each waiting ``ack_timeout`` seconds for its answer. A message the stream already
    holds is answered as a duplicate with its original sequence.
    """

    def __init__(
        self,
        js: JetStreamContext,
        stream: str,
        *,
        attempts: int = 10,
        total_timeout: float = 30.0,
        ack_timeout: float = 2.0,
    ) -> None:
        self._js = js
        self._stream = stream
        self._attempts = attempts
        self._total_timeout = total_timeout
        self._ack_timeout = ack_timeout

    async def send(self, message: Outgoing) -> int:
        """Publish one message and return its stream sequence, retrying a lost acknowledgement.

        A message larger than the server accepts raises ``PayloadTooLarge`` unsent.
        """
        return (await self.acknowledged(message)).seq

    async def acknowledged(self, message: Outgoing) -> api.PubAck:
        """Publish one message and return the stream's acknowledgement (``duplicate`` set when
        the stream already held its id), retrying a lost acknowledgement with the same id."""
        check_size(message, _max_payload(self._js))
        deadline = time.monotonic() + self._total_timeout
        for attempt in range(1, self._attempts + 1):
            left = deadline - time.monotonic()
            try:
                return await self._send_once(message, max(0.05, min(self._ack_timeout, left)))
            except _AMBIGUOUS as error:
                left = deadline - time.monotonic()
                if attempt == self._attempts or left <= 0:
                    raise PublishFailed(
                        f"no acknowledgement for message {message.headers.get(MSG_ID)} after "
                        f"{attempt} attempts ({type(error).__name__}); publishing it again with "
                        "the same id is safe"
                    ) from error
                log.warning(
                    "publish_retrying",
                    msg_id=message.headers.get(MSG_ID),
                    attempt=attempt,
                    error=type(error).__name__,
                )
                await asyncio.sleep(min(0.1 * 2 ** (attempt - 1), 1.0, left))
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _send_once(self, message: Outgoing, timeout: float) -> api.PubAck:
        """Publish once; return the stream's acknowledgement."""
        return await self._js.publish(
            message.subject,
            message.data,
            timeout=timeout,
            stream=self._stream,
            headers=message.headers,
        )

    async def send_many(self, messages: Iterable[Outgoing]) -> list[int]:
        """Publish messages pipelined (one round trip's latency for the lot), in order.

        Messages whose acknowledgement does not come in time are sent again one by one, in
        order, with the same ids (see ``send``).
        """
        batch = list(messages)
        limit = _max_payload(self._js)
        for message in batch:  # all or nothing: none is sent when one is too large
            check_size(message, limit)
        futures = [await self._start(message) for message in batch]
        await self.await_acks(futures)
        return [
            (await self.settled(message, ack)).seq
            for message, ack in zip(batch, futures, strict=True)
        ]

    async def start(self, message: Outgoing) -> asyncio.Future[api.PubAck]:
        """Publish one message without waiting: the future is its acknowledgement (settle
        it with ``settled``). A message larger than the server accepts raises unsent."""
        check_size(message, _max_payload(self._js))
        return await self._start(message)

    async def _start(self, message: Outgoing) -> asyncio.Future[api.PubAck]:
        return await self._js.publish_async(
            message.subject, message.data, stream=self._stream, headers=message.headers
        )

    async def await_acks(self, futures: Iterable[asyncio.Future[api.PubAck]]) -> None:
        """Wait while acknowledgements keep coming, each within the acknowledgement timeout."""
        pending = set(futures)
        while pending:  # a large batch may take long; stop waiting once none answers in time
            done, pending = await asyncio.wait(pending, timeout=self._ack_timeout)
            if not done:
                break

    async def settled(self, message: Outgoing, ack: asyncio.Future[api.PubAck]) -> api.PubAck:
        """Return the acknowledgement of a started message, sending it again (same id) when
        it did not come in time (``await_acks`` first: this does not wait for it)."""
        if ack.done() and not ack.cancelled() and ack.exception() is None:
            return ack.result()
        if not ack.done():
            ack.cancel()
        elif not ack.cancelled() and not isinstance(ack.exception(), _AMBIGUOUS):
            raise ack.exception()  # type: ignore[misc]
        return await self.acknowledged(message)


def outgoing_event(event: Event) -> Outgoing:
    """Return the log message of an event: its subject, JSON and its id as Nats-Msg-Id."""
    return Outgoing(subject_of(event), encode_event(event), msg_id(event))


class EventPublisher(StreamPublisher):
    """Append events to the log; the event id is the Nats-Msg-Id, so retries deduplicate."""

    @classmethod
    def from_settings(cls, js: JetStreamContext, settings: Settings) -> EventPublisher:
        """Build a publisher with the settings' stream and retry bounds."""
        return cls(
            js,
            settings.stream_name,
            attempts=settings.publish_attempts,
            total_timeout=settings.publish_timeout_seconds,
            ack_timeout=settings.publish_ack_timeout_seconds,
        )

    async def publish(self, event: Event) -> int:
        """Append one event and return its stream sequence, retrying a lost acknowledgement."""
        return await self.send(outgoing_event(event))

    async def publish_many(self, events: Iterable[Event]) -> list[int]:
        """Append events pipelined, in order; unacknowledged ones are sent again one by one."""
        return await self.send_many(outgoing_event(event) for event in events)


async def publish_dead_letter(
    js: JetStreamContext, consumer: str, *, subject: str, sequence: int, data: bytes, reason: str
) -> None:
    """Park the original bytes of a log message in the dead-letter stream with the reason."""
    await js.publish(
        subjects.dead_letter_subject(consumer),
        data,
        headers={
            MSG_ID: f"{consumer}:{sequence}",
            subjects.DLQ_REASON: REDACTOR.scrub(reason)[:2_000],
            subjects.DLQ_CONSUMER: consumer,
            subjects.DLQ_ORIGINAL_SUBJECT: subject,
            subjects.DLQ_ORIGINAL_SEQUENCE: str(sequence),
        },
    )


async def last_sequence(js: JetStreamContext, stream: str) -> int:
    """Return the sequence of the newest message in ``stream`` (0 when empty)."""
    info = await js.stream_info(stream)
    return info.state.last_seq


async def _consumer_settled(js: JetStreamContext, stream: str, durable: str) -> bool:
    try:
        info = await js.consumer_info(stream, durable)
    except NotFoundError:
        return False
    return info.num_pending == 0 and (info.num_ack_pending or 0) == 0


async def wait_until_applied(
    js: JetStreamContext,
    stream: str,
    consumers: Sequence[str] = subjects.LOG_CONSUMERS,
    timeout: float = 30.0,
    poll_interval: float = 0.02,
) -> int:
    """Wait until every consumer has applied everything in the stream; return the sequence.

    Workers publish derived events while they work, so "settled" means: every consumer has
    nothing pending and unacked, and the stream did not grow while we looked. A projection
    of a partitioned log is waited for on every partition's consumer.

    A look stops at the first consumer behind, and the next look starts with it: while a
    backlog is worked off, a look costs two requests (the stream's last sequence, that
    consumer's info) where it cost one per consumer and two, nine every 20 ms; the waiting
    client took 16% of a core beside the 2-core pipeline it waited on (docs/performance.md,
    session 34). A request the server does not answer in time is asked again until ``timeout``.
    """
    deadline = time.monotonic() + timeout
    partitions = None
    first = 0
    while True:
        try:
            if partitions is None:
                partitions = stream_partitions(await js.stream_info(stream))
                consumers = subjects.partition_consumers(consumers, partitions)
            before = await last_sequence(js, stream)
            behind = await _first_behind(js, stream, [*consumers[first:], *consumers[:first]])
            if behind is None and await last_sequence(js, stream) == before:
                return before
            first = consumers.index(behind) if behind is not None else 0
        except nats.errors.TimeoutError as slow:
            # The server did not answer one request in time (a JetStream API request waits 5 s
            # by default; a busy 2-core machine saw it): look again, until the wait's deadline.
            if time.monotonic() > deadline:
                raise TimeoutError(f"the log's server did not answer within {timeout}s") from slow
            continue
        if time.monotonic() > deadline:
            waiting = [name for name in consumers if not await _consumer_settled(js, stream, name)]
            raise TimeoutError(f"consumers still behind after {timeout}s: {waiting}")
        await asyncio.sleep(poll_interval)


async def _first_behind(js: JetStreamContext, stream: str, consumers: Sequence[str]) -> str | None:
    """Return the first of ``consumers`` not settled, in order (None: every one is)."""
    for name in consumers:
        if not await _consumer_settled(js, stream, name):
            return name
    return None


async def last_sequence_on(
    js: JetStreamContext, stream: str, filter_subject: str, timeout: float = 10.0
) -> int:
    """Return the sequence of the newest message on the subjects ``filter_subject`` matches
    (0 when none match)."""
    return max((await last_sequences(js, stream, filter_subject, timeout)).values(), default=0)


async def last_sequences(
    js: JetStreamContext,
    stream: str,
    filter_subject: str,
    timeout: float = 10.0,
    *,
    on_leader: bool = True,
) -> dict[str, int]:
    """Return the newest sequence on each subject ``filter_subject`` matches.

    A consumer filtered on those subjects delivers the last message of each: what a tenant's
    credentials allow (stream info, which lists every subject, is not). ``on_leader``: read
    on the stream's leader (see ``_placed_reader``; False for a tenant's credentials).
    """
    config = api.ConsumerConfig(
        filter_subject=filter_subject,
        deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
        ack_policy=api.AckPolicy.NONE,
        inactive_threshold=timeout,
        mem_storage=True,
    )
    found: dict[str, int] = {}
    leader = await _leader_to_read_on(js, stream, on_leader)
    async with _reader(js, stream, filter_subject, config, leader) as (subscription, remaining):
        while remaining > 0:
            batch = await _fetch(subscription, min(remaining, READ_BATCH), timeout)
            found.update((m.subject, int(m.metadata.sequence.stream)) for m in batch)
            remaining = batch[-1].metadata.num_pending or 0
    return found


PLACEMENT_ATTEMPTS = 100  # tries for a reader on the stream's leader (0.2 s apart while electing)


class ReaderMisplaced(TimeoutError):
    """No reader landed on the stream's leader in time (an outage: callers that retry one,
    retry this): the read would not be known complete."""


@contextlib.asynccontextmanager
async def _reader(
    js: JetStreamContext,
    stream: str,
    filter_subject: str,
    config: api.ConsumerConfig,
    leader: str | None,
) -> AsyncIterator[tuple[JetStreamContext.PullSubscription, int]]:
    """Yield an ephemeral pull consumer on one filter and what it has to read; delete it after.

    One filter per consumer: its creation then names the filter in the API subject, which is
    what per-tenant permissions check. ``leader``: see ``_placed_reader``.
    """
    subscription, info = await _placed_reader(js, stream, filter_subject, config, leader)
    try:
        yield subscription, info.num_pending or 0
    finally:
        await _drop_reader(js, stream, subscription, info.name)


FETCH_ATTEMPTS = 8  # a new reader's first pulls may find no responder: asked again,
FETCH_BACKOFF = 0.05  # this many seconds after the first, doubling (6.35 s in all)


async def _fetch(
    subscription: JetStreamContext.PullSubscription, batch: int, timeout: float
) -> list[Msg]:
    """Pull up to ``batch`` messages of a reader, asking again while none answers.

    A reader's pulls are answered by the node it sits on. The client's own node learns that
    node listens some moments after the reader is made, and until it does a pull comes back
    503, no responders (measured: once in a 12-minute test suite, a reader on a three-node
    cluster whose third node was catching up). The reader exists, so asking again reads on.
    """
    for attempt in range(FETCH_ATTEMPTS):
        try:
            return await subscription.fetch(batch, timeout=timeout)
        except nats.js.errors.ServiceUnavailableError:
            if attempt == FETCH_ATTEMPTS - 1:
                raise
            log.debug("log_reader_unanswered", attempt=attempt + 1)
            await asyncio.sleep(FETCH_BACKOFF * 2**attempt)
    raise AssertionError("unreachable: the last attempt returns or raises")


async def _leader_to_read_on(js: JetStreamContext, stream: str, on_leader: bool) -> str | None:
    """Return the stream's leader for a read's readers to sit on (None: anywhere)."""
    return await _stream_leader(js, stream) if on_leader else None


async def _placed_reader(
    js: JetStreamContext,
    stream: str,
    filter_subject: str,
    config: api.ConsumerConfig,
    leader: str | None,
) -> tuple[JetStreamContext.PullSubscription, api.ConsumerInfo]:
    """Create a reader on ``leader``'s node, asking again which node leads when it lands
    elsewhere (None: anywhere; "": the cluster is electing one, wait).

    A reader (a consumer of one replica) reads the store of the node it is placed on. A node
    back from a restart catches its replica up for a while (seconds, under load), and a
    reader placed there counts fewer messages and reports nothing pending: the read ends
    short and says nothing (measured: after a cluster restart, 28 of 60 turns; a node back
    while 30,000 messages were written, one reader in three short for a second). The
    stream's leader holds every acknowledged message. Asking which node leads needs stream
    info, which a tenant's credentials do not allow: a tenant's reads are not placed.
    """
    for _ in range(PLACEMENT_ATTEMPTS):
        if leader == "":  # no reader is known to be complete until one leads
            await asyncio.sleep(0.2)
            leader = await _stream_leader(js, stream)
            continue
        subscription = await js.pull_subscribe(filter_subject, stream=stream, config=config)
        info = await subscription.consumer_info()
        placed = info.cluster.leader if info.cluster is not None else None
        if leader is None or placed is None or placed == leader:
            return subscription, info
        await _drop_reader(js, stream, subscription, info.name)
        log.debug("log_reader_replaced", stream=stream, placed=placed, leader=leader)
        leader = await _stream_leader(js, stream)  # it may have moved
    raise ReaderMisplaced(
        f"no reader of {stream} landed on its leader in {PLACEMENT_ATTEMPTS} attempts"
        " (or the stream had no leader)"
    )


async def _stream_leader(js: JetStreamContext, stream: str) -> str | None:
    """Return the name of the node leading ``stream`` (None: one server, not a cluster;
    "": a cluster with no leader yet)."""
    cluster = (await js.stream_info(stream)).cluster
    return (cluster.leader or "") if cluster is not None else None


async def _drop_reader(
    js: JetStreamContext, stream: str, subscription: JetStreamContext.PullSubscription, name: str
) -> None:
    await subscription.unsubscribe()
    with contextlib.suppress(NotFoundError):
        await js.delete_consumer(stream, name)


def filters_of(info: api.ConsumerInfo) -> list[str]:
    """Return the subjects a consumer reads."""
    config = info.config
    return list(config.filter_subjects or [config.filter_subject or subjects.ALL_EVENTS])


async def next_on(
    js: JetStreamContext, stream: str, subject_filter: str, sequence: int
) -> api.RawStreamMsg | None:
    """Return the first message at or after ``sequence`` on ``subject_filter`` (None: none)."""
    try:
        return await js.get_msg(stream, seq=sequence, subject=subject_filter, next=True)
    except NotFoundError:
        return None


async def read_range(
    js: JetStreamContext, stream: str, filters: Sequence[str], first: int, last: int
) -> list[api.RawStreamMsg]:
    """Return every message on ``filters`` with a sequence in ``first..last``, in order."""
    found: dict[int, api.RawStreamMsg] = {}
    for subject_filter in filters:
        sequence = first
        while (raw := await next_on(js, stream, subject_filter, sequence)) is not None:
            if raw.seq is None or raw.seq > last:
                break
            found[raw.seq] = raw
            sequence = raw.seq + 1
    return [found[s] for s in sorted(found)]


async def passed(
    js: JetStreamContext, stream: str, filters: Sequence[str], position: int, sequence: int
) -> bool:
    """Return whether a projection at ``position`` has applied the log through ``sequence``:
    no message on the subjects it reads lies between the two."""
    for subject_filter in filters:
        raw = await next_on(js, stream, subject_filter, position + 1)
        if raw is not None and raw.seq is not None and raw.seq <= sequence:
            return False
    return True


async def _consumer_passed(
    js: JetStreamContext, stream: str, durable: str, newest: Mapping[str, int]
) -> bool:
    """Return whether ``durable`` has applied the newest message of every subject in
    ``newest`` that its filters read (its acknowledgement floor is at or past it)."""
    try:
        info = await js.consumer_info(stream, durable)
    except NotFoundError:
        return False
    filters = filters_of(info)
    target = max(
        (
            sequence
            for subject, sequence in newest.items()
            if any(subjects.subject_matches(f, subject) for f in filters)
        ),
        default=0,
    )
    return (info.ack_floor.stream_seq or 0) >= target


def _partition_of_user(consumers: Sequence[str], newest: Mapping[str, int]) -> list[str]:
    """Return the consumers of the user's partition (read from its stored subjects): one
    user's events are all in one partition."""
    found = {subjects.partition_of(subject) for subject in newest} - {None}
    if len(found) != 1:
        return list(consumers)
    return subjects.in_partition(consumers, found.pop() or 0)


async def wait_until_user_applied(
    js: JetStreamContext,
    stream: str,
    filter_subject: str,
    consumers: Sequence[str] = subjects.LOG_CONSUMERS,
    timeout: float = 30.0,
    *,
    on_leader: bool = True,
) -> int:
    """Wait until every consumer has applied the newest events ``filter_subject`` matches now.

    A worker acknowledges a message only after committing it and everything before it, so a
    consumer whose acknowledgement floor reached a sequence has applied it. Each consumer
    reads only the event types its projection folds, so each waits for the newest of those.
    Return the newest sequence of all. ``on_leader``: as ``last_sequences``.
    """
    newest = await last_sequences(js, stream, filter_subject, on_leader=on_leader)
    consumers = _partition_of_user(consumers, newest)
    deadline = time.monotonic() + timeout
    while True:
        passed = [await _consumer_passed(js, stream, name, newest) for name in consumers]
        if all(passed):
            return max(newest.values(), default=0)
        if time.monotonic() > deadline:
            waiting = [name for name, done in zip(consumers, passed, strict=True) if not done]
            target = max(newest.values(), default=0)
            raise TimeoutError(f"consumers still before seq {target} after {timeout}s: {waiting}")
        await asyncio.sleep(0.02)


READ_BATCH = 256


async def read_subjects(
    js: JetStreamContext,
    stream: str,
    filters: Sequence[str],
    timeout: float = 10.0,
    *,
    on_leader: bool = True,
) -> list[bytes]:
    """Return the data of every message on the ``filters`` subjects, in stream order.

    An ephemeral consumer per filter reads what the stream holds at the call,
    unacknowledged (it changes nothing), and is deleted after. ``on_leader``: read on the
    stream's leader (see ``_placed_reader``; False for a tenant's credentials).
    """
    async with asyncio.timeout(timeout):
        leader = await _leader_to_read_on(js, stream, on_leader)
        found = await asyncio.gather(
            *(_read_subject(js, stream, f, timeout, leader) for f in filters)
        )
    return [data for _, data in sorted(item for part in found for item in part)]


async def _read_subject(
    js: JetStreamContext, stream: str, filter_subject: str, timeout: float, leader: str | None
) -> list[tuple[int, bytes]]:
    """Return (stream sequence, data) of every message on one filter's subjects."""
    config = api.ConsumerConfig(
        filter_subject=filter_subject,
        deliver_policy=api.DeliverPolicy.ALL,
        ack_policy=api.AckPolicy.NONE,
        inactive_threshold=timeout,
        mem_storage=True,
    )
    found: list[tuple[int, bytes]] = []
    async with _reader(js, stream, filter_subject, config, leader) as (subscription, remaining):
        while remaining > 0:
            batch = await _fetch(subscription, min(remaining, READ_BATCH), timeout)
            found += [(int(m.metadata.sequence.stream), m.data) for m in batch]
            remaining = batch[-1].metadata.num_pending or 0
    return found
