"""The production topology as processes: a 3-node JetStream cluster, one process per component.

Started the way `memoryd cluster up` starts it (services/cluster.py), on the test's
PostgreSQL. An app on the cluster records turns and memories for two users; every process
applies them (lag 0 in its /metrics), recall finds them, and the streams are R3.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from prometheus_client.parser import text_string_to_metric_families

from memoryd.services.cluster import PROCESS_GROUPS, REPLICAS, Topology
from memoryd.shared import subjects
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope
from memoryd.shared.settings import Settings
from tests.conftest import _reset_database, unique

pytestmark = [pytest.mark.integration, pytest.mark.cluster]
# Below pytest's own timeout (300 s), so a process that never gets ready is named with its log.
STARTUP_SECONDS = 180.0


@pytest.fixture(scope="module")
async def topology(
    tmp_path_factory: pytest.TempPathFactory, postgres_url: str | None
) -> AsyncIterator[Topology]:
    if postgres_url is None:
        pytest.skip("the topology runs on PostgreSQL: set MEMORYD_TEST_DATABASE_URL")
    await _reset_database(Settings(database_url=postgres_url))
    running = Topology(tmp_path_factory.mktemp("cluster"), postgres_url)
    try:
        await running.start(timeout=STARTUP_SECONDS)
        yield running
    finally:
        await running.stop()


def lags(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        sample.labels["consumer"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "memoryd_consumer_lag"
    }


async def caught_up(url: str) -> bool:
    for _ in range(100):
        found = await asyncio.to_thread(lags, url)
        if found and all(lag == 0 for lag in found.values()):
            return True
        await asyncio.sleep(0.1)
    return False


async def test_every_component_process_applies_and_recall_answers(topology: Topology) -> None:
    tenant = unique("t")
    alice, bob = Scope(tenant=tenant, user_id="alice"), Scope(tenant=tenant, user_id="bob")
    async with await MemoryClient.connect(topology.nats.url) as client:
        turns = []
        for number in range(5):
            for scope in (alice, bob):
                text = f"{scope.user_id} planted {number} tulips in the garden"
                turns.append(await client.record_turn(scope, text, "Lovely."))
        await client.remember(alice, "Alice is allergic to peanuts", key="allergy")
        await client.wait_until_applied(timeout=180)
        answer = await client.recall(alice, "peanuts allergy", timeout=30)
        tulips = await client.recall(bob, "tulips", timeout=30)

    assert "Alice is allergic to peanuts" in [m.content for m in answer.memories]
    assert {str(t) for t in turns[1::2]} & {item.turn_id for item in tulips.items}
    assert set(PROCESS_GROUPS) == set(topology.processes)
    for name in topology.processes:  # refreshed every second: caught up within a few
        assert await caught_up(topology.metrics_url(name)), name


async def test_the_streams_are_replicated_on_three_nodes(topology: Topology) -> None:
    nc = await nats.connect(topology.nats.url.split(","))
    info = await nc.jetstream().stream_info(Settings().stream_name)
    await nc.close()
    assert REPLICAS == info.config.num_replicas
    assert info.cluster is not None
    assert REPLICAS - 1 == len(info.cluster.replicas or [])
    assert subjects.ALL_EVENTS in (info.config.subjects or [])


def test_docker_compose_runs_the_same_components() -> None:
    """The compose file's memoryd services cover exactly the topology's components."""
    import yaml

    compose = yaml.safe_load(Path("docker-compose.yml").read_text())
    commands = [
        service["command"]
        for service in compose["services"].values()
        if service.get("command", [None])[0] == "up"
    ]
    composed = {
        c for command in commands for c in command[command.index("--components") + 1].split(",")
    }
    grouped = {component for group in PROCESS_GROUPS.values() for component in group}
    assert composed == grouped
