"""The async client SDK: publish events, recall, subscribe to notifications, settle."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.js import api
from nats.js.errors import NotFoundError
from pydantic import BaseModel, TypeAdapter

from memoryd.shared import subjects
from memoryd.shared.adapters.nats_log import (
    DEFAULT_CONNECT_TIMEOUT,
    EventPublisher,
    NatsAuth,
    connect,
    read_subjects,
    wait_until_applied,
    wait_until_user_applied,
)
from memoryd.shared.client.notifications import (
    LiveNotifications,
    Notifications,
    Start,
    StreamNotifications,
    check_durable,
    consumer_config,
)
from memoryd.shared.contracts.browse import BrowseError, BrowseReply, BrowseRequest, UserMemory
from memoryd.shared.contracts.catalog import decode_valid
from memoryd.shared.contracts.events import (
    Category,
    Event,
    MemoryForgotten,
    MemoryRemembered,
    MemoryType,
    SessionEnded,
    TurnRecorded,
)
from memoryd.shared.contracts.memories import (
    ListMemoriesError,
    ListMemoriesReply,
    ListMemoriesRequest,
    MemoryList,
)
from memoryd.shared.contracts.notifications import MemoryUpdated
from memoryd.shared.contracts.recall import (
    RecallError,
    RecallReply,
    RecallRequest,
    RecallResponse,
)
from memoryd.shared.contracts.scope import Scope, SearchScope
from memoryd.shared.domain.memories import (
    MemoryEvent,
    memory_history,
    memory_id_for_key,
    memory_identity,
)
from memoryd.shared.settings import Settings

_reply_adapter: TypeAdapter[RecallReply] = TypeAdapter(RecallReply)
_list_adapter: TypeAdapter[ListMemoriesReply] = TypeAdapter(ListMemoriesReply)
_browse_adapter: TypeAdapter[BrowseReply] = TypeAdapter(BrowseReply)


class RecallFailed(Exception):
    """The recall service answered with an error."""

    def __init__(self, error: RecallError) -> None:
        super().__init__(f"{error.code}: {error.message}")
        self.error = error


class RecallOverloaded(RecallFailed):
    """The recall service is at capacity and refused the request at once: back off, retry."""


class ListMemoriesFailed(Exception):
    """The service refused or could not answer a list request."""

    def __init__(self, error: ListMemoriesError) -> None:
        super().__init__(f"{error.code}: {error.message}")
        self.error = error


class BrowseFailed(Exception):
    """The service refused or could not answer a browse request."""

    def __init__(self, error: BrowseError) -> None:
        super().__init__(f"{error.code}: {error.message}")
        self.error = error


def _failure(error: RecallError) -> RecallFailed:
    if error.code == "overloaded":
        return RecallOverloaded(error)
    return RecallFailed(error)


def _now() -> datetime:
    return datetime.now(UTC)


class MemoryClient:
    """Talk to memoryd over NATS. Build it with ``await MemoryClient.connect(url)``.

    Publishing is safe to retry: every event carries its id as its Nats-Msg-Id and the stream
    stores an id once. When an acknowledgement is lost (NATS restarting, a reconnect) the
    client itself sends the event again with the same id, up to ``publish_attempts`` times
    within ``publish_timeout`` seconds, and only then raises ``PublishFailed`` (the event may
    or may not be stored). A caller that retries by hand after that must send the SAME id:
    ``record_turn(..., turn_id=the_id_of_the_first_try)``, or ``publish(event)`` with the
    same event object; a new id would store the event twice.
    """

    def __init__(
        self,
        nc: NatsClient,
        stream: str = "MEMORYD",
        *,
        notify_stream: str = "MEMORYD_NOTIFY",
        publish_attempts: int = 10,
        publish_timeout: float = 30.0,
        publish_ack_timeout: float = 2.0,
        tenant: str | None = None,
    ) -> None:
        self._nc = nc
        self._tenant = tenant
        self._js = nc.jetstream()
        self._stream = stream
        self._notify_stream = notify_stream
        self._publisher = EventPublisher(
            self._js,
            stream,
            attempts=publish_attempts,
            total_timeout=publish_timeout,
            ack_timeout=publish_ack_timeout,
        )

    @classmethod
    async def connect(
        cls,
        url: str,
        stream: str = "MEMORYD",
        *,
        notify_stream: str = "MEMORYD_NOTIFY",
        timeout: float = DEFAULT_CONNECT_TIMEOUT,
        publish_attempts: int = 10,
        publish_timeout: float = 30.0,
        publish_ack_timeout: float = 2.0,
        auth: NatsAuth | None = None,
    ) -> MemoryClient:
        """Connect to the NATS server memoryd runs on.

        ``auth``: the credentials `memoryd tenants` made (a tenant's user, password and
        tenant name); without, the connection has none (the embedded default's open server).
        Raises ``NatsUnavailable`` (a ``ConnectionError``) when no server answers at ``url``
        within ``timeout`` seconds, ``NatsRefused`` when it refuses the credentials.
        """
        nc = await connect(url, name="memoryd-client", timeout=timeout, auth=auth)
        return cls(
            nc,
            stream,
            notify_stream=notify_stream,
            publish_attempts=publish_attempts,
            publish_timeout=publish_timeout,
            publish_ack_timeout=publish_ack_timeout,
            tenant=auth.tenant if auth is not None else None,
        )

    @classmethod
    async def from_settings(cls, settings: Settings, url: str | None = None) -> MemoryClient:
        """Connect with the settings' URL (or ``url``), stream, timeouts and publish bounds."""
        return await cls.connect(
            url or settings.nats_url or settings.embedded_nats_url(),
            settings.stream_name,
            notify_stream=settings.notify_stream_name,
            timeout=settings.connect_timeout_seconds,
            publish_attempts=settings.publish_attempts,
            publish_timeout=settings.publish_timeout_seconds,
            publish_ack_timeout=settings.publish_ack_timeout_seconds,
            auth=NatsAuth.from_settings(settings),
        )

    async def close(self) -> None:
        """Flush and close the connection."""
        await self._nc.drain()

    async def __aenter__(self) -> MemoryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def publish(self, event: Event) -> int:
        """Append any event to the log; return its stream sequence.

        A lost acknowledgement is retried with the same event id (stored once); after the
        bounds, ``PublishFailed``: publishing the same event object again is safe.
        """
        return await self._publisher.publish(event)

    async def publish_many(self, events: Iterable[Event]) -> list[int]:
        """Append events pipelined, in order; return their stream sequences."""
        return await self._publisher.publish_many(events)

    async def record_turn(
        self,
        scope: Scope,
        query: str,
        response: str,
        occurred_at: datetime | None = None,
        turn_id: uuid.UUID | None = None,
    ) -> uuid.UUID:
        """Record a conversation turn; return its id (pass ``turn_id`` to make retries safe)."""
        event = TurnRecorded(
            event_id=turn_id or uuid.uuid4(),
            occurred_at=occurred_at or _now(),
            scope=scope,
            query=query,
            response=response,
        )
        await self.publish(event)
        return event.event_id

    async def remember(  # noqa: PLR0913 (the memory's fields, keyword-only)
        self,
        scope: Scope,
        content: str,
        *,
        key: str | None = None,
        category: Category = Category.CORE,
        memory_type: MemoryType = MemoryType.SEMANTIC,
        importance: float = 0.5,
        evergreen: bool = False,
        metadata: dict[str, Any] | None = None,
        occurred_at: datetime | None = None,
        event_id: uuid.UUID | None = None,
    ) -> uuid.UUID:
        """Store an explicit memory; the same key in the same scope replaces it. Return its id.

        The service decides the id (``memory_identity``): derived from the scope and key when
        a key is given, else the event's id. Forget by that id or by the key. ``event_id``
        (default: a new one) makes retries safe and is what ``recallable`` waits on.
        """
        event = MemoryRemembered(
            event_id=event_id or uuid.uuid4(),
            occurred_at=occurred_at or _now(),
            scope=scope,
            key=key,
            content=content,
            category=category,
            memory_type=memory_type,
            importance=importance,
            evergreen=evergreen,
            metadata=metadata or {},
        )
        await self.publish(event)
        return memory_identity(event)

    async def forget(
        self, scope: Scope, memory_id: uuid.UUID | None = None, key: str | None = None
    ) -> None:
        """Forget a memory by id or by key."""
        await self.publish(
            MemoryForgotten(occurred_at=_now(), scope=scope, memory_id=memory_id, key=key)
        )

    async def end_session(self, scope: Scope, occurred_at: datetime | None = None) -> None:
        """Mark a session ended: its conversation-category memories are cleared."""
        await self.publish(SessionEnded(occurred_at=occurred_at or _now(), scope=scope))

    async def recall(
        self,
        scope: Scope,
        query: str = "",
        *,
        search_scope: SearchScope = SearchScope.AGENT,
        limit: int = 10,
        max_tokens: int = 2_000,
        timeout: float = 5.0,
        **options: Any,
    ) -> RecallResponse:
        """Ask the recall service for the memory context of ``query``.

        ``options`` are the request's hybrid-retrieval fields: ``filters``, ``weights``,
        ``rrf_k``, ``max_per_session``, ``min_score``, ``explain``, ``include_pages``.
        The request carries ``timeout`` as its deadline, so the service drops it unworked
        once this call has given up; at capacity it raises ``RecallOverloaded`` at once.
        """
        options.setdefault("deadline", _now() + timedelta(seconds=timeout))
        request = RecallRequest(
            scope=scope,
            query=query,
            search_scope=search_scope,
            limit=limit,
            max_tokens=max_tokens,
            **options,
        )
        return await self.recall_raw(scope.tenant, request.model_dump_json().encode(), timeout)

    async def recall_raw(self, tenant: str, payload: bytes, timeout: float = 5.0) -> RecallResponse:
        """Send a pre-encoded recall request of ``tenant`` (for callers that build JSON).

        It goes to the tenant's own recall subject; a payload naming another tenant is
        refused ``forbidden``.
        """
        subject = subjects.recall_subject(tenant)
        reply = await self._nc.request(subject, payload, timeout=timeout)
        answer = _reply_adapter.validate_json(reply.data)
        if isinstance(answer, RecallError):
            raise _failure(answer)
        return answer

    async def list_memories(
        self,
        scope: Scope,
        *,
        search_scope: SearchScope = SearchScope.AGENT,
        categories: Sequence[Category] | None = None,
        limit: int = 50,
        offset: int = 0,
        timeout: float = 5.0,
    ) -> MemoryList:
        """Return a page of the explicit memories visible to ``scope``, newest change first.

        Asked of the query service on the tenant's own subject; ``total`` counts them all.
        Raises ``ListMemoriesFailed`` when the service refuses the request.
        """
        request = ListMemoriesRequest(
            scope=scope,
            search_scope=search_scope,
            categories=tuple(categories) if categories is not None else None,
            limit=limit,
            offset=offset,
        )
        subject = subjects.list_memories_subject(scope.tenant)
        answer = _list_adapter.validate_json(await self._ask(subject, request, timeout))
        if isinstance(answer, ListMemoriesError):
            raise ListMemoriesFailed(answer)
        return answer

    async def browse(self, scope: Scope, *, limit: int = 100, timeout: float = 5.0) -> UserMemory:
        """Return everything memoryd holds of ``scope``'s user (every agent), tier by tier.

        STM pages, MTM segments with their heat and pages, the persona, explicit memories and
        the knowledge graph (relations with their validity); ``limit`` bounds each list.
        Asked of the query service on the tenant's own subject; raises ``BrowseFailed`` when
        the service refuses the request.
        """
        request = BrowseRequest(scope=scope, limit=limit)
        subject = subjects.browse_subject(scope.tenant)
        answer = _browse_adapter.validate_json(await self._ask(subject, request, timeout))
        if isinstance(answer, BrowseError):
            raise BrowseFailed(answer)
        return answer

    async def _ask(self, subject: str, request: BaseModel, timeout: float) -> bytes:
        """Send a request-reply of the query service; return the reply's bytes."""
        reply = await self._nc.request(subject, request.model_dump_json().encode(), timeout=timeout)
        return reply.data

    async def memory_history(
        self,
        scope: Scope,
        memory_id: uuid.UUID | None = None,
        key: str | None = None,
        *,
        timeout: float = 10.0,
    ) -> list[MemoryEvent]:
        """Return every event that made or ended one memory of the user, in log order.

        Name it by ``memory_id`` or by ``key`` (in ``scope``'s agent and namespace), not
        both. Read from the log itself, on the user's subjects only: each version
        (``memory.remembered``), the forget, the expiry, or the session end that cleared it.
        """
        if (memory_id is None) == (key is None):
            raise ValueError("memory_history needs exactly one of memory_id or key")
        target = memory_id if memory_id is not None else memory_id_for_key(scope, str(key))
        filters = subjects.user_event_filters(
            scope.tenant, scope.user_id, subjects.MEMORY_HISTORY_TYPES
        )
        found = await read_subjects(
            self._js, self._stream, filters, timeout, on_leader=self._tenant is None
        )
        return memory_history(_decoded(found, scope), target)

    @asynccontextmanager
    async def notifications(
        self,
        tenant: str,
        user_id: str | None = None,
        *,
        start: Start = "new",
        durable: str | None = None,
        max_pending: int = 256,
        ack_wait: float = 30.0,
    ) -> AsyncIterator[Notifications]:
        """Subscribe to the memory-updated notifications of a tenant (or one user).

        With the defaults: a live subscription to what is published from now on, holding at
        most ``max_pending`` notifications the app has not taken (more are dropped and counted
        in ``dropped``). With ``durable`` (a consumer name: letters, digits, ``-``, ``_``) or
        another ``start`` ("all", a notification stream sequence, an aware datetime): read
        from the notification stream, in order, nothing dropped; a durable subscription
        resumes after the last notification it acknowledged (``start`` applies only when the
        name is first used), one taken is acknowledged when the next is asked for or the
        block ends without an error, and at most ``max_pending`` are handed out
        unacknowledged (one left unacknowledged comes back after ``ack_wait`` seconds).
        """
        subject = subjects.notify_filter(tenant, user_id)
        if durable is None and start == "new":
            async with self._live_notifications(subject, max_pending) as live:
                yield live
            return
        config = consumer_config(
            subject, start, durable=durable, max_pending=max_pending, ack_wait=ack_wait
        )
        async with self._stream_notifications(subject, config, max_pending) as stored:
            yield stored

    @asynccontextmanager
    async def _live_notifications(
        self, subject: str, max_pending: int
    ) -> AsyncIterator[LiveNotifications]:
        live = LiveNotifications(max_pending)

        async def deliver(msg: Any) -> None:
            live.deliver(msg.data)

        subscription = await self._nc.subscribe(subject, cb=deliver)
        await self._nc.flush()
        try:
            yield live
        finally:
            await subscription.unsubscribe()

    @asynccontextmanager
    async def _stream_notifications(
        self, subject: str, config: api.ConsumerConfig, max_pending: int
    ) -> AsyncIterator[StreamNotifications]:
        if config.durable_name is not None:
            with contextlib.suppress(NotFoundError):
                existing = await self._js.consumer_info(self._notify_stream, config.durable_name)
                check_durable(existing.config, config)
        # Named (an unnamed one gets a random name), so its creation names its filter, which is
        # what per-tenant permissions check; delivered into this connection's inbox.
        config.name = config.durable_name or uuid.uuid4().hex
        config.deliver_subject = self._nc.new_inbox()
        subscription = await self._js.subscribe(
            subject,
            durable=config.durable_name,
            stream=self._notify_stream,
            config=config,
            manual_ack=True,
            pending_msgs_limit=max_pending + 1,
        )
        stored = StreamNotifications(subscription, max_pending)
        completed = False
        try:
            yield stored
            completed = True
        finally:
            # Also unsubscribes; an unnamed consumer, deleted below, is not waited on.
            await stored.close(completed=completed, resumable=config.durable_name is not None)
            if config.durable_name is None:
                with contextlib.suppress(NotFoundError):
                    await self._js.delete_consumer(self._notify_stream, config.name)

    async def recallable(
        self, event_id: uuid.UUID, timeout: float = 30.0, *, scope: Scope | None = None
    ) -> MemoryUpdated:
        """Wait until recall finds the event ``event_id`` (a turn's id, a memory's event id).

        Return its ``recallable`` notification: every projection recall reads has applied the
        event. The notification stream is read from its start for that one event, so a
        notification published before this call counts too. ``scope`` (the event's) narrows
        the read to its tenant and user, as per-tenant permissions require. ``TimeoutError``
        after ``timeout`` seconds (also when the projections run in separate processes, where
        no such notification is published).
        """
        subject = subjects.recallable_filter(event_id, scope, tenant=self._tenant)
        config = consumer_config(subject, "all", durable=None, max_pending=1, ack_wait=timeout)
        async with self._stream_notifications(subject, config, 1) as stored:
            async with asyncio.timeout(timeout):
                return await stored.get()

    async def wait_until_applied(
        self,
        timeout: float = 30.0,
        consumers: Sequence[str] = subjects.LOG_CONSUMERS,
        *,
        scope: Scope | None = None,
    ) -> int:
        """Wait until the workers have applied everything published so far; return its sequence.

        With ``scope``, only that user's events (tenant and user): wait until every consumer
        has applied the newest event on the user's subjects at the time of the call, however
        long other users' backlogs are.
        """
        if scope is not None:
            events = subjects.user_events_filter(scope.tenant, scope.user_id)
        elif self._tenant is not None:  # a tenant's credentials see only its own events
            events = subjects.tenant_events_filter(self._tenant)
        else:
            return await wait_until_applied(self._js, self._stream, consumers, timeout)
        return await wait_until_user_applied(
            self._js, self._stream, events, consumers, timeout, on_leader=self._tenant is None
        )


def _decoded(messages: Iterable[bytes], scope: Scope) -> list[Event]:
    """Decode the user's events; skip what the workers dead-letter (invalid or misfiled)."""
    owner = (scope.tenant, scope.user_id)
    return [e for e in decode_valid(messages) if (e.scope.tenant, e.scope.user_id) == owner]
