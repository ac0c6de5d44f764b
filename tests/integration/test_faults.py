"""The fault suite: steady ingest into the process topology, one fault at a time.

Each component process SIGKILLed mid-ingest (and restarted), one of three NATS nodes lost and
returned, the whole NATS cluster restarted, PostgreSQL's connections terminated, PostgreSQL
restarted (its own instance, from initdb). After each:
every acknowledged turn is in the log once and applied by every projection, nothing is
dead-lettered for an outage, and the read models and index equal a fresh fold of the log.
About three minutes (`-m 'not cluster'` skips it); `memoryd bench faults` prints the table.
"""

from __future__ import annotations

import asyncio
import math
import shutil
from collections.abc import AsyncIterator

import pytest

from memoryd.services.bench.faults import FAULTS, FaultRow, fault_topology, run_fault
from memoryd.services.cluster import Topology
from memoryd.shared.adapters.private_postgres import PrivatePostgres

pytestmark = [pytest.mark.integration, pytest.mark.cluster]
# Below pytest's own timeout (300 s), so a process that never gets ready is named with its log.
STARTUP_SECONDS = 180.0


@pytest.fixture(scope="module")
async def topology(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Topology]:
    """The topology on a PostgreSQL of its own (initdb + pg_ctl), which a fault restarts."""
    if shutil.which("initdb") is None:
        pytest.skip("no initdb here: the fault suite runs its own PostgreSQL")
    postgres = PrivatePostgres()
    await asyncio.to_thread(postgres.start)
    running = fault_topology(tmp_path_factory.mktemp("faults"), postgres)
    try:
        await running.start(timeout=STARTUP_SECONDS)
        yield running
    finally:
        await running.stop()
        await asyncio.to_thread(postgres.stop)


@pytest.mark.parametrize("fault", FAULTS)
async def test_a_fault_loses_nothing_and_doubles_nothing(topology: Topology, fault: str) -> None:
    row: FaultRow = await run_fault(topology, fault, turns=60, rate=30.0)

    assert 60 == row.published
    assert (0, 0, 0) == (row.lost, row.doubled, row.parked), row
    assert math.isfinite(row.recovery_seconds)
