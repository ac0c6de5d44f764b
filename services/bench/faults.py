"""`memoryd bench faults`: steady ingest into the process topology, one fault at a time.

For each fault, a publisher records turns of four interleaved users at a steady rate (bounded
in count), and a third of the way in the fault strikes: a component process SIGKILLed (and
started again, as a supervisor would), a NATS node killed and returned, the whole NATS
cluster restarted, PostgreSQL's connections terminated, or PostgreSQL restarted (stopped at
once, as a crash would, and started again). The topology runs on a PostgreSQL of its own
(``PrivatePostgres``), so nobody's database is touched. Then, per fault:

- published: turns the publisher had acknowledged; each is sent with its id as Nats-Msg-Id
  and retried with the same id, so a publish that timed out is neither lost nor doubled;
- lost: acknowledged but absent from the log, or in the log but not applied by every
  projection once the ingest settled;
- doubled: a turn id the log holds twice, plus every read model (or index kind) that differs
  from a fresh fold of the log into scratch storage (``verify``: a doubled effect shows there);
- dead-lettered: messages parked during the run (an outage must park nothing);
- recovery: seconds from the fault until every projection had applied (its tracking row in
  SQL) everything published before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.bootstrap import Stack, start_stack
from memoryd.services.cluster import PROCESS_GROUPS, Topology
from memoryd.services.runtime.leases import bucket_of, holders
from memoryd.shared import subjects
from memoryd.shared.adapters.nats_log import filters_of, passed, read_subjects, stream_partitions
from memoryd.shared.adapters.outages import is_outage
from memoryd.shared.adapters.private_postgres import PrivatePostgres
from memoryd.shared.adapters.sql import tracking
from memoryd.shared.adapters.sql.engine import create_engine, session_factory
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope, TurnRecorded, decode_event
from memoryd.shared.settings import Settings

KILLS = tuple(f"kill:{name}" for name in PROCESS_GROUPS)
# The last one leaves the topology with one STM replica fewer for good: it runs last.
FAULTS = (*KILLS, "nats:node", "nats:cluster", "pg:terminate", "pg:restart", "replica:stm-2")
# The suite's topology: a partitioned log, and two STM replicas sharing its partitions.
PARTITIONS = 4
REPLICAS = {"stm": 2}
USERS = 4
T = TypeVar("T")


@dataclass(frozen=True)
class FaultRow:
    """What one fault cost: turns lost, doubled, and the seconds until caught up."""

    fault: str
    published: int
    lost: int
    doubled: int
    parked: int
    recovery_seconds: float
    differences: tuple[str, ...] = ()
    # A replica lost for good: seconds until the others held every partition it had held.
    takeover_seconds: float | None = None


async def _applied(
    sessions: async_sessionmaker[AsyncSession], js: JetStreamContext, sequence: int
) -> bool:
    """Return whether every projection has applied the log through ``sequence``: its tracking
    row is past every message on the subjects its consumer reads, up to ``sequence``."""
    stream = Settings().stream_name
    partitions = stream_partitions(await js.stream_info(stream))
    consumers = subjects.partition_consumers(subjects.LOG_CONSUMERS, partitions)
    async with sessions() as session:
        positions = await tracking.positions(session, consumers)
    for consumer, position in positions.items():
        filters = filters_of(await js.consumer_info(stream, consumer))
        if not await passed(js, stream, filters, position, sequence):
            return False
    return True


async def _until_applied(
    sessions: async_sessionmaker[AsyncSession], js: JetStreamContext, sequence: int, timeout: float
) -> bool:
    """Wait until every projection has applied the log through ``sequence``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # the database or NATS may be what is away
            if await _applied(sessions, js, sequence):
                return True
        await asyncio.sleep(0.1)
    return False


async def _retrying(read: Callable[[], Awaitable[T]], timeout: float = 60.0) -> T:
    """Ask again while NATS is electing leaders after a fault (a read that timed out)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await read()
        except Exception as error:
            if not is_outage(error) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def _parked(client: MemoryClient) -> int:
    """Return how many dead letters the dead-letter stream holds."""
    info = await client._js.stream_info(Settings().dead_letter_stream)
    return int(info.state.messages or 0)


async def _terminate_postgres(database_url: str) -> int:
    """Terminate every other connection to the database (as an operator or a failover would)."""
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            terminated = await connection.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
            return len(terminated.all())
    finally:
        await engine.dispose()


async def inject(topology: Topology, fault: str) -> None:
    """Strike ``fault`` and heal it the way production would (restart what died)."""
    kind, _, target = fault.partition(":")
    if kind == "kill":
        process = topology.processes[target]
        await asyncio.to_thread(process.kill)
        await asyncio.sleep(1.0)
        process.start()
    elif kind == "replica":  # lost for good: the other replicas take its partitions over
        await asyncio.to_thread(topology.processes.pop(target).kill)
    elif fault == "nats:node":
        node = topology.nats.nodes[1]
        await asyncio.to_thread(node.kill)
        await asyncio.sleep(3.0)
        await node.astart()
    elif fault == "nats:cluster":
        await topology.nats.stop()
        await topology.nats.start()
    elif fault == "pg:terminate":
        await _terminate_postgres(topology.database_url)
    elif fault == "pg:restart":
        if topology.postgres is None:
            raise ValueError("pg:restart needs the topology's own PostgreSQL (PrivatePostgres)")
        await asyncio.to_thread(topology.postgres.restart)
    else:
        raise ValueError(f"unknown fault {fault!r}: one of {', '.join(FAULTS)}")


@dataclass
class Ingest:
    """The publisher's side: what it had acknowledged, up to which sequence, when a third was in."""

    acked: list[uuid.UUID] = field(default_factory=list)
    last_sequence: int = 0
    third: asyncio.Event = field(default_factory=asyncio.Event)


async def _publish_one(client: MemoryClient, event: TurnRecorded) -> int | None:
    """Publish until acknowledged: the SDK retries for a minute, then the same id again."""
    for _ in range(10):
        try:
            return await client.publish(event)
        except Exception:
            await asyncio.sleep(0.5)
    return None


async def _publish(
    client: MemoryClient, scopes: Sequence[Scope], turns: int, rate: float, ingest: Ingest
) -> None:
    """Record ``turns`` turns of the interleaved users at ``rate`` a second."""
    for number in range(turns):
        if number == turns // 3:
            ingest.third.set()
        event = TurnRecorded(
            occurred_at=datetime.now(UTC),
            scope=scopes[number % len(scopes)],
            query=f"turn {number}: I watered the plants on day {number}",
            response="Noted.",
        )
        sequence = await _publish_one(client, event)
        if sequence is not None:
            ingest.last_sequence = max(ingest.last_sequence, sequence)
            ingest.acked.append(event.event_id)
        await asyncio.sleep(1.0 / rate)


async def _stored_turns(client: MemoryClient, stream: str, tenant: str) -> list[uuid.UUID]:
    js = client._js
    filters = subjects.stored_filters(f"{subjects.EVENTS_PREFIX}.{tenant}.*.turn_recorded_v1")
    return [decode_event(data).event_id for data in await read_subjects(js, stream, filters, 60)]


async def _leases_of(js: JetStreamContext, holder: str) -> set[str] | None:
    """Return the partitions ``holder`` holds a lease on now (None: nobody holds any)."""
    try:
        kv = await js.key_value(bucket_of(Settings().stream_name))
    except NotFoundError:
        return None
    stream = await js.stream_info(Settings().stream_name)
    lanes = subjects.partition_consumers(subjects.LOG_CONSUMERS, stream_partitions(stream))
    return {lane for lane, who in (await holders(kv, lanes)).items() if who == holder}


async def _taken_over(
    js: JetStreamContext, lanes: set[str], dead: str, timeout: float = 120.0
) -> float:
    """Wait until another replica holds each of ``lanes`` that ``dead`` held; the seconds."""
    started = time.monotonic()
    kv = await js.key_value(bucket_of(Settings().stream_name))
    while time.monotonic() - started < timeout:
        held_by = await holders(kv, sorted(lanes))
        if len(held_by) == len(lanes) and dead not in held_by.values():
            return time.monotonic() - started
        await asyncio.sleep(0.1)
    return float("inf")


VERIFY_TIMEOUT = 300.0


async def _verify_within(stack: Stack, timeout: float) -> tuple[str, ...]:
    """Verify, or say it did not finish, printing where it waited (every task's stack)."""
    task = asyncio.create_task(stack.verify())
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if task in done:
        return tuple(task.result().differences)
    print(f"verify did not finish in {timeout:.0f} s; where each task waits:", file=sys.stderr)
    for waiting in asyncio.all_tasks():
        waiting.print_stack(file=sys.stderr)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return (f"verify did not finish in {timeout:.0f} s",)


async def verify_topology(topology: Topology) -> tuple[str, ...]:
    """Stop the processes, compare the read models and index with a fresh fold, start again."""
    for process in topology.processes.values():
        await asyncio.to_thread(process.stop)
    settings = Settings(
        nats_url=topology.nats.url,
        database_url=topology.database_url,
        data_dir=topology.base / "index-recall",  # the index lives with the indexer
        stream_replicas=3,
        partitions=topology.partitions,
    )
    stack = await start_stack(settings, components=())
    try:
        differences = await _verify_within(stack, VERIFY_TIMEOUT)
    finally:
        await stack.stop()
    for process in topology.processes.values():
        process.start()
    await topology.wait_ready()
    return differences


async def run_fault(
    topology: Topology, fault: str, turns: int = 90, rate: float = 30.0
) -> FaultRow:
    """Drive a steady ingest, strike ``fault`` a third of the way in, and account for it."""
    stream = Settings().stream_name
    tenant = f"faults-{uuid.uuid4().hex[:8]}"
    scopes = [Scope(tenant=tenant, user_id=f"user-{index}") for index in range(USERS)]
    engine = create_engine(topology.database_url)
    sessions = session_factory(engine, writer=False)
    client = await MemoryClient.connect(topology.nats.url, publish_timeout=60.0)
    try:
        parked_before = await _retrying(lambda: _parked(client))
        ingest = Ingest()
        publishing = asyncio.create_task(_publish(client, scopes, turns, rate, ingest))
        await ingest.third.wait()
        started, before = time.monotonic(), ingest.last_sequence
        kind, _, target = fault.partition(":")
        lanes = await _leases_of(client._js, target) if kind == "replica" else None
        await inject(topology, fault)
        takeover = await _taken_over(client._js, lanes, target) if lanes else None
        recovered = await _until_applied(sessions, client._js, before, 300)
        recovery = time.monotonic() - started if recovered else float("inf")
        await publishing
        stored = await _retrying(lambda: _stored_turns(client, stream, tenant))
        info = await _retrying(lambda: client._js.stream_info(stream))
        settled = await _until_applied(sessions, client._js, info.state.last_seq or 0, 300)
        parked = await _retrying(lambda: _parked(client)) - parked_before
    finally:
        await client.close()
        await engine.dispose()
    lost = len(set(ingest.acked) - set(stored)) + (0 if settled else len(stored))
    differences = await verify_topology(topology) if settled else ()
    doubled = len(stored) - len(set(stored)) + len(differences)
    return FaultRow(
        fault,
        len(ingest.acked),
        lost,
        doubled,
        parked,
        round(recovery, 2),
        differences,
        None if takeover is None else round(takeover, 2),
    )


def render(rows: Sequence[FaultRow]) -> str:
    """Return the fault table as markdown."""
    lines = [
        "| fault | turns published | lost | doubled | dead-lettered | recovery (s) "
        "| takeover (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.fault} | {r.published} | {r.lost} | {r.doubled} | {r.parked} "
        f"| {r.recovery_seconds:.2f} "
        f"| {'' if r.takeover_seconds is None else f'{r.takeover_seconds:.2f}'} |"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def write(rows: Sequence[FaultRow], out: Path) -> None:
    """Write the table as JSON and markdown under ``out``."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    (out / "faults.json").write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    (out / "faults.md").write_text(render(rows))


def fault_topology(base: Path, postgres: PrivatePostgres) -> Topology:
    """Return the topology the faults strike: partitioned, two STM replicas, its own
    PostgreSQL (restarted by one fault)."""
    return Topology(base, postgres.url, postgres=postgres, partitions=PARTITIONS, replicas=REPLICAS)


async def run_faults_bench(
    settings: Settings, faults: Sequence[str], turns: int, rate: float, out: Path
) -> list[FaultRow]:
    """Start a fresh topology on a private PostgreSQL, strike each fault, write the table."""
    base = settings.data_dir / "faults"
    shutil.rmtree(base, ignore_errors=True)
    postgres = PrivatePostgres()
    await asyncio.to_thread(postgres.start)
    topology = fault_topology(base, postgres)
    rows = []
    try:
        await topology.start()
        for fault in faults:
            rows.append(await run_fault(topology, fault, turns, rate))
            print(render(rows[-1:]).splitlines()[-1], flush=True)
    finally:
        await topology.stop()
        await asyncio.to_thread(postgres.stop)
    write(rows, out)
    return rows
