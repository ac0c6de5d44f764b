"""The pull loop of a projection worker: a durable JetStream pull consumer, read in batches.

Why not FastStream's batch pull subscriber: measured here (docs/architecture.md), its fetch
loop (partial-batch re-fetches with shrinking timeouts) left messages delivered but never
handed to the handler until ack_wait ran out (30 s stalls), and it holds a partial batch for
the whole batch timeout. This loop waits for ONE message when idle (it returns the moment one
arrives) and, when that message says more are pending, fetches those at once: low latency
when quiet, full batches under load. FastStream still serves the recall request-reply.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import nats.errors
import structlog
from nats.js import JetStreamContext, api

from memoryd.services.runtime.projection import ProjectionRunner
from memoryd.shared import subjects
from memoryd.shared.settings import Settings
from memoryd.shared.tasks import cancelled

log = structlog.get_logger(__name__)


def consumer_config(
    durable: str, settings: Settings, filters: Sequence[str] = (subjects.ALL_EVENTS,)
) -> api.ConsumerConfig:
    """Describe a projection's durable pull consumer over ``filters`` of the log."""
    return api.ConsumerConfig(
        durable_name=durable,
        deliver_policy=api.DeliverPolicy.ALL,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=settings.ack_wait_seconds,
        max_deliver=-1,  # bounded by the runner, which parks poison messages
        max_ack_pending=max(1_000, settings.batch_size * 4),
        filter_subjects=list(filters),
    )


class PullWorker:
    """Feed one projection runner from its durable pull consumer until stopped."""

    def __init__(self, js: JetStreamContext, runner: ProjectionRunner, settings: Settings) -> None:
        self._js = js
        self._runner = runner
        self._settings = settings
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._busy = False
        self._leader: str | None = None  # the consumer's leader when last asked

    async def start(self) -> None:
        """Create the durable consumer (or bring its filters up to date), bind it, start."""
        durable, stream = self._runner.projection.consumer, self._settings.stream_name
        config = consumer_config(durable, self._settings, self._runner.filters)
        info = await self._js.add_consumer(stream, config)  # creates, or updates in place
        self._leader = info.cluster.leader if info.cluster is not None else None
        if self._settings.stream_replicas > 1:  # started after a failure, maybe: check a while
            self._runner.check_deliveries()
        subscription = await self._js.pull_subscribe_bind(durable=durable, stream=stream)
        self._subscription = subscription
        self._task = asyncio.create_task(self._loop(subscription), name=f"pull:{durable}")

    async def _loop(self, subscription: JetStreamContext.PullSubscription) -> None:
        while not self._stopping.is_set():
            try:
                msgs = await subscription.fetch(1, timeout=self._settings.idle_poll_seconds)
                backlog = msgs[-1].metadata.num_pending or 0
                if backlog:
                    msgs += await subscription.fetch(
                        min(backlog, self._settings.batch_size - 1), timeout=5.0
                    )
            except (TimeoutError, nats.errors.TimeoutError):
                await self._catch_up(subscription)
                continue
            except Exception as error:  # NATS away, a leader election: ask again, never die
                log.warning(
                    "fetch_failed",
                    consumer=self._runner.projection.consumer,
                    error=f"{type(error).__name__}: {error}",
                )
                self._runner.check_deliveries()
                await asyncio.sleep(1.0)
                continue
            self._busy = True
            try:
                await self._runner.handle(msgs)
            except Exception:
                # Unacked messages are redelivered after ack_wait; keep consuming the rest.
                log.exception("batch_not_acked", consumer=self._runner.projection.consumer)
                await asyncio.sleep(1.0)
            finally:
                self._busy = False

    async def _catch_up(self, subscription: JetStreamContext.PullSubscription) -> None:
        """Idle with messages delivered and unacked: a fetch lost them; apply them now."""
        try:
            info = await subscription.consumer_info()
            self._note_leader(info)
            if info.num_ack_pending and info.delivered and info.delivered.stream_seq:
                self._busy = True
                await self._runner.catch_up(info.delivered.stream_seq)
        except Exception:
            log.warning("catch_up_failed", consumer=self._runner.projection.consumer, exc_info=True)
        finally:
            self._busy = False

    def _note_leader(self, info: api.ConsumerInfo) -> None:
        """Check the deliveries for a while when the consumer's leader has moved."""
        leader = info.cluster.leader if info.cluster is not None else None
        if leader != self._leader:
            self._leader = leader
            self._runner.check_deliveries()

    async def stop(self, timeout: float = 10.0) -> None:
        """Finish the batch in hand, then stop (unacked messages are redelivered later)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self._task is None:
            return
        if not self._busy:  # waiting in fetch: nothing in hand, stop now
            self._task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except asyncio.CancelledError:
            pass
        except TimeoutError:
            await cancelled(self._task)
        # Messages fetched but not handled stay unacked and are redelivered to the next run.
        await self._subscription.unsubscribe()
