"""memoryd as separate processes: a killed worker loses nothing; `memoryd up` stops cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nats
import pytest
from nats.js.errors import NotFoundError
from sqlalchemy import func, select

from memoryd.shared import subjects
from memoryd.shared.adapters.embedded_nats import _port_open, free_port
from memoryd.shared.adapters.sql.engine import create_engine
from memoryd.shared.adapters.sql.tables import stm_pages
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import PageEvicted, Scope, TurnRecorded, decode_event
from memoryd.shared.settings import Settings
from tests.conftest import memoryd_streams, unique

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@contextmanager
def memoryd_process(
    args: list[str], env: dict[str, str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``memoryd <args>`` as a child process, killing it if the test leaves it running."""
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "memoryd.services.cli", *args],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


async def consumer_ack_floor(js: nats.js.JetStreamContext, stream: str, name: str) -> int:
    """Return the stream sequence a consumer has acked up to (0 if it does not exist yet)."""
    try:
        info = await js.consumer_info(stream, name)
    except NotFoundError:
        return 0
    return info.ack_floor.stream_seq or 0


async def clean_log(nats_url: str) -> tuple[nats.aio.client.Client, Settings]:
    """Connect to the test's nats-server and delete memoryd's streams; return the connection."""
    settings = Settings(nats_url=nats_url)
    nc = await nats.connect(nats_url)
    for name in memoryd_streams(settings):
        with contextlib.suppress(NotFoundError):
            await nc.jetstream().delete_stream(name)
    return nc, settings


def worker_env(nats_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    """Return the environment of a `memoryd` child on the test's NATS and its own SQLite."""
    return {
        "MEMORYD_NATS_URL": nats_url,
        "MEMORYD_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'memoryd.db'}",
        "MEMORYD_DATA_DIR": str(tmp_path),
        **extra,
    }


async def wait_for(predicate, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    """Poll an async predicate until it holds."""
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.05)


async def test_killing_the_stm_worker_mid_stream_loses_nothing(
    nats_url: str, tmp_path: Path
) -> None:
    """SIGKILL the STM worker mid-stream; after a restart each page and eviction is there once."""
    nc, settings = await clean_log(nats_url)
    js = nc.jetstream()
    # Messages the killed worker held come back after ack_wait; keep the test short.
    env = worker_env(nats_url, tmp_path, MEMORYD_BATCH_SIZE="50", MEMORYD_ACK_WAIT_SECONDS="3")
    users = [Scope(tenant="crash", user_id=unique("u")) for _ in range(10)]
    turns_per_user = 300
    log = tmp_path / "worker.log"
    with memoryd_process(["up", "--components", "stm"], env, log) as worker:
        await wait_for(lambda: _consumer_exists(js, settings))
        client = MemoryClient(nc)
        events = [
            TurnRecorded(
                occurred_at=T0 + timedelta(seconds=i),
                scope=user,
                query=f"q{i}",
                response=f"r{i}",
            )
            for i in range(turns_per_user)
            for user in users
        ]
        await client.publish_many(events)
        await wait_for(lambda: _past(js, settings, 300), timeout=60)
        worker.kill()
        worker.wait(10)
    killed_at = await consumer_ack_floor(js, settings.stream_name, subjects.STM_CONSUMER)

    with memoryd_process(["up", "--components", "stm"], env, log) as worker:
        await client.wait_until_applied(timeout=120, consumers=[subjects.STM_CONSUMER])
        worker.send_signal(signal.SIGTERM)
        assert 0 == worker.wait(30), log.read_text()[-3000:]

    evictions = await _evicted_turns(js, settings)
    assert killed_at < len(events)  # the kill really happened mid-stream
    assert len(events) - 7 * len(users) == len(evictions)
    assert len(evictions) == len(set(evictions))
    engine = create_engine(env["MEMORYD_DATABASE_URL"])
    async with engine.connect() as conn:
        counts = await conn.execute(
            select(stm_pages.c.user_id, func.count()).group_by(stm_pages.c.user_id)
        )
        rows = counts.all()
        first_user = await conn.execute(
            select(stm_pages.c.query)
            .where(stm_pages.c.user_id == users[0].user_id)
            .order_by(stm_pages.c.stream_seq)
        )
        kept = first_user.scalars().all()
    await engine.dispose()
    assert {user.user_id: 7 for user in users} == dict(rows)
    assert [f"q{i}" for i in range(turns_per_user - 7, turns_per_user)] == kept
    await js.delete_stream(settings.stream_name)
    await nc.close()


async def _consumer_exists(js: nats.js.JetStreamContext, settings: Settings) -> bool:
    try:
        await js.consumer_info(settings.stream_name, subjects.STM_CONSUMER)
    except NotFoundError:
        return False
    return True


async def _past(js: nats.js.JetStreamContext, settings: Settings, sequence: int) -> bool:
    return await consumer_ack_floor(js, settings.stream_name, subjects.STM_CONSUMER) >= sequence


async def _evicted_turns(js: nats.js.JetStreamContext, settings: Settings) -> list[str]:
    sub = await js.pull_subscribe(
        subjects.EVENTS_PREFIX + ".*.*.page_evicted_v1", stream=settings.stream_name
    )
    turn_ids: list[str] = []
    while True:
        try:
            msgs = await sub.fetch(500, timeout=1)
        except TimeoutError:  # nats-py raises the built-in one or its own subclass
            break
        for msg in msgs:
            await msg.ack()
            evicted = decode_event(msg.data)
            assert isinstance(evicted, PageEvicted)
            turn_ids.append(str(evicted.turn_id))
    await sub.unsubscribe()
    return turn_ids


@pytest.mark.model  # `memoryd up` loads MiniLM at start
def test_up_spawns_nats_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    """`memoryd up` serves on the embedded nats-server and Ctrl-C leaves no process behind."""
    port = free_port()
    env = {
        "MEMORYD_DATA_DIR": str(tmp_path),
        "MEMORYD_EMBEDDED_NATS_PORT": str(port),
        "MEMORYD_NATS_URL": "",
        "MEMORYD_DATABASE_URL": "",
    }
    log = tmp_path / "up.log"
    with memoryd_process(["up"], env, log) as process:
        # "up" means ready: the embedding models are loaded first (seconds; more on a busy box).
        deadline = time.monotonic() + 120
        while "memoryd is up" not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        assert _port_open("127.0.0.1", port)
        process.send_signal(signal.SIGINT)
        assert 0 == process.wait(30)
    assert not _port_open("127.0.0.1", port)
    assert f"nats://127.0.0.1:{port}\n" == (tmp_path / "nats.url").read_text()
