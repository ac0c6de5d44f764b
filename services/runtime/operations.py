"""Operations: one component process's health, readiness and Prometheus metrics.

With ``MEMORYD_METRICS_PORT`` set, the process serves on ``MEMORYD_METRICS_HOST``:

- ``/healthz``: 200 while the event loop turns (its heartbeat is recent), else 503;
- ``/readyz``: 200 once the components started and NATS is connected and SQL answers, else
  503 with the reasons;
- ``/metrics``: Prometheus text: consumer lag per projection, events applied (a counter: its
  rate is events applied per second), the projection's position, dead letters per consumer,
  the recall latency histogram by outcome, the embedders' queues, and the process's own
  (CPU, memory, open files).

The HTTP server is prometheus-client's WSGI application in a thread beside the event loop,
so a stalled loop still answers (and says it is stalled); the figures that need NATS or SQL
are refreshed by a task on the loop every ``MEMORYD_METRICS_INTERVAL_SECONDS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import structlog
from nats.aio.client import Client as NatsClient
from nats.js.errors import NotFoundError
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    make_wsgi_app,
)
from prometheus_client.exposition import ThreadingWSGIServer

from memoryd.services.runtime.projection import Positioned
from memoryd.shared import subjects

log = structlog.get_logger(__name__)

# The process's registry: every module records into these, the endpoint exports them.
REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

EVENTS_APPLIED = Counter(
    "memoryd_events_applied",
    "Log events a projection has applied (its rate: events applied per second)",
    ["consumer"],
    registry=REGISTRY,
)
POSITION = Gauge(
    "memoryd_projection_position",
    "The log sequence a projection has applied through",
    ["consumer"],
    registry=REGISTRY,
)
CONSUMER_LAG = Gauge(
    "memoryd_consumer_lag",
    "Log events a projection's consumer has not yet applied (pending plus unacknowledged)",
    ["consumer"],
    registry=REGISTRY,
)
DEAD_LETTERS = Gauge(
    "memoryd_dead_letters",
    "Messages parked in the dead-letter stream, by the consumer that parked them",
    ["consumer"],
    registry=REGISTRY,
)
RECALL_SECONDS = Histogram(
    "memoryd_recall_seconds",
    "Time to answer a recall request, by outcome (ok or the error code)",
    ["outcome"],
    buckets=(0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    registry=REGISTRY,
)
EMBEDDER_QUEUE = Gauge(
    "memoryd_embedder_queue_texts",
    "Texts waiting for the embedding model (workers' model, recall's query model)",
    ["model"],
    registry=REGISTRY,
)

# The loop's heartbeat may be this old before /healthz says the process is stalled.
STALL_SECONDS = 10.0


async def count_applied(consumer: str, through: int, batch: Sequence[Positioned]) -> None:
    """Record a projection's applied batch (a runner listener)."""
    EVENTS_APPLIED.labels(consumer).inc(len(batch))
    POSITION.labels(consumer).set(through)


def watch_queue(model: str, depth: Callable[[], int]) -> None:
    """Export an embedder's queue depth, read at each scrape."""
    EMBEDDER_QUEUE.labels(model).set_function(depth)


@dataclass
class Probe:
    """What /healthz and /readyz answer from: the loop's heartbeat and the last checks."""

    heartbeat: float = field(default_factory=time.monotonic)
    started: bool = False
    failures: tuple[str, ...] = ("starting",)

    def healthy(self, now: float) -> bool:
        """Return whether the event loop turned within ``STALL_SECONDS``."""
        return now - self.heartbeat < STALL_SECONDS

    def ready(self, now: float) -> tuple[bool, tuple[str, ...]]:
        """Return whether the process serves, and why not."""
        reasons = self.failures if self.started else ("starting",)
        if not self.healthy(now):
            reasons = (*reasons, "event loop stalled")
        return not reasons, reasons


def readiness_failures(nats_connected: bool, sql_error: str | None) -> tuple[str, ...]:
    """Return what keeps the process from serving (empty: ready)."""
    failures = []
    if not nats_connected:
        failures.append("NATS not connected")
    if sql_error is not None:
        failures.append(f"SQL: {sql_error}")
    return tuple(failures)


def _plain(start_response: Callable[..., Any], status: str, text: str) -> list[bytes]:
    body = text.encode()
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def wsgi_app(probe: Probe) -> Callable[[Mapping[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """Return the WSGI application: the probes, and prometheus-client's /metrics."""
    metrics = make_wsgi_app(REGISTRY)

    def app(environ: Mapping[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path, now = environ.get("PATH_INFO", ""), time.monotonic()
        if path == "/healthz":
            if probe.healthy(now):
                return _plain(start_response, "200 OK", "ok\n")
            return _plain(start_response, "503 Service Unavailable", "event loop stalled\n")
        if path == "/readyz":
            ready, reasons = probe.ready(now)
            if ready:
                return _plain(start_response, "200 OK", "ready\n")
            return _plain(start_response, "503 Service Unavailable", "\n".join(reasons) + "\n")
        if path == "/metrics":
            exported: Iterable[bytes] = metrics(dict(environ), start_response)
            return exported
        return _plain(start_response, "404 Not Found", "/healthz, /readyz or /metrics\n")

    return app


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not log lines."""


@dataclass
class OperationsServer:
    """The HTTP endpoint in its thread and the task that refreshes the figures."""

    probe: Probe
    host: str
    port: int
    _server: ThreadingWSGIServer | None = None
    _task: asyncio.Task[None] | None = None

    def start(self, refresh: Callable[[], Awaitable[None]], interval: float) -> None:
        """Serve in a thread; refresh the figures every ``interval`` seconds on this loop."""
        server = make_server(
            self.host, self.port, wsgi_app(self.probe), ThreadingWSGIServer, handler_class=_Quiet
        )
        self.port = int(server.server_port)
        threading.Thread(target=server.serve_forever, name="memoryd-ops", daemon=True).start()
        self._server = server
        self._task = asyncio.create_task(self._refresh_forever(refresh, interval))
        log.info("operations_serving", url=f"http://{self.host}:{self.port}", paths="/healthz")

    async def _refresh_forever(
        self, refresh: Callable[[], Awaitable[None]], interval: float
    ) -> None:
        while True:
            self.probe.heartbeat = time.monotonic()
            try:
                await refresh()
            except Exception as error:  # a failed refresh is a reason, never a crash
                self.probe.failures = (f"checks failed: {type(error).__name__}",)
            await asyncio.sleep(interval)

    async def stop(self) -> None:
        """Stop refreshing and serving."""
        task = self._task
        # A cancel that lands inside a refresh can be swallowed by the client it interrupts
        # (it comes back as an error, which the loop records and sleeps on): a fresh clone's
        # test_operations hung 290 s in this stop. Cancel until the task has ended.
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)
        if self._server is not None:
            await asyncio.to_thread(self._server.shutdown)
            self._server.server_close()


async def consumer_lags(nc: NatsClient, stream: str, consumers: Sequence[str]) -> dict[str, int]:
    """Return each consumer's lag: messages pending plus delivered and unacknowledged."""
    js, lags = nc.jetstream(), {}
    for name in consumers:
        with contextlib.suppress(NotFoundError):
            info = await js.consumer_info(stream, name)
            lags[name] = (info.num_pending or 0) + (info.num_ack_pending or 0)
    return lags


async def dead_letter_counts(nc: NatsClient, stream: str) -> dict[str, int]:
    """Return how many dead letters each consumer parked (from the stream's subjects)."""
    info = await nc.jetstream().stream_info(stream, subjects_filter=subjects.ALL_DEAD_LETTERS)
    prefix = f"{subjects.DLQ_PREFIX}."
    return {s.removeprefix(prefix): n for s, n in (info.state.subjects or {}).items()}
