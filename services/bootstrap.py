"""The composition root: builds every client, engine and worker from Settings.

Nothing is connected at import time; ``start_stack`` wires what the chosen components need
and ``Stack.stop`` tears it down in reverse order.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Literal

import structlog
from faststream.message import StreamMessage
from faststream.nats import NatsBroker
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from memoryd.services.memories.projection import MemoriesProjection
from memoryd.services.recall.service import handle_recall
from memoryd.services.runtime.consumer import PullWorker
from memoryd.services.runtime.projection import Projection, ProjectionRunner
from memoryd.services.stm.projection import StmProjection
from memoryd.shared import subjects
from memoryd.shared.adapters.embedded_nats import EmbeddedNats
from memoryd.shared.adapters.nats_log import (
    EventPublisher,
    connect,
    ensure_streams,
    server_list,
)
from memoryd.shared.adapters.sql.engine import create_engine, session_factory
from memoryd.shared.adapters.sql.schema import create_schema
from memoryd.shared.settings import Settings

log = structlog.get_logger(__name__)

Component = Literal["stm", "memories", "recall"]
ALL_COMPONENTS: tuple[Component, ...] = ("stm", "memories", "recall")


@dataclass
class Stack:
    """A running memoryd: its connections, engine, broker and (maybe) embedded server."""

    settings: Settings
    nats_url: str
    nc: NatsClient
    js: JetStreamContext
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    publisher: EventPublisher
    broker: NatsBroker
    runners: dict[str, ProjectionRunner]
    _exit: AsyncExitStack

    async def stop(self) -> None:
        """Stop consuming, then close connections, engine and the embedded server."""
        await self._exit.aclose()


def build_projections(settings: Settings, components: Sequence[Component]) -> list[Projection]:
    """Return the projections the chosen components run."""
    projections: list[Projection] = []
    if "stm" in components:
        projections.append(StmProjection(settings.stm_capacity))
    if "memories" in components:
        projections.append(MemoriesProjection(settings.daily_ttl_days))
    return projections


async def _raw_bodies(message: StreamMessage[Any]) -> Any:
    # The recall handler validates the bytes itself, so a malformed request gets a clear
    # error reply instead of failing inside FastStream's JSON decoding.
    return message.body


def subscribe_recall(broker: NatsBroker, sessions: async_sessionmaker[AsyncSession]) -> None:
    """Attach the recall request-reply handler (a queue group, so replicas share the load)."""

    async def recall(body: Any) -> bytes:
        return await handle_recall(sessions, body)

    broker.subscriber(subjects.RECALL_SUBJECT, queue=subjects.RECALL_QUEUE, decoder=_raw_bodies)(
        recall
    )


async def start_stack(
    settings: Settings, components: Sequence[Component] = ALL_COMPONENTS
) -> Stack:
    """Start memoryd: the embedded nats-server unless a URL is set, SQL, and the components."""
    exit_stack = AsyncExitStack()
    try:
        nats_url = settings.nats_url
        if not nats_url:
            server = EmbeddedNats(
                settings.data_dir / "nats",
                settings.embedded_nats_host,
                settings.embedded_nats_port,
            )
            await server.astart()
            exit_stack.push_async_callback(server.astop)
            nats_url = server.url
        nc = await connect(nats_url, name="memoryd-workers")
        exit_stack.push_async_callback(nc.close)  # workers ack synchronously: nothing to drain
        js = nc.jetstream()
        await ensure_streams(js, settings)
        engine = create_engine(settings.resolved_database_url())
        exit_stack.push_async_callback(engine.dispose)
        await create_schema(engine)
        sessions = session_factory(engine)
        publisher = EventPublisher(js, settings.stream_name)
        runners = {}
        for projection in build_projections(settings, components):
            runner = ProjectionRunner(
                projection,
                sessions,
                nc,
                js,
                publisher,
                settings.stream_name,
                max_attempts=settings.max_attempts,
            )
            worker = PullWorker(js, runner, settings)
            await worker.start()
            exit_stack.push_async_callback(worker.stop)
            runners[projection.consumer] = runner
        broker = NatsBroker(server_list(nats_url), logger=None)
        if "recall" in components:
            subscribe_recall(broker, sessions)
        await broker.start()
        exit_stack.push_async_callback(broker.stop)
    except BaseException:
        await exit_stack.aclose()
        raise
    log.info("memoryd_started", nats_url=nats_url, components=list(components))
    return Stack(
        settings, nats_url, nc, js, engine, sessions, publisher, broker, runners, exit_stack
    )
