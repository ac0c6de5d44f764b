"""Health, readiness and Prometheus metrics, scraped from a running stack over HTTP."""

from __future__ import annotations

import asyncio

import httpx
import nats
import pytest
from prometheus_client.parser import text_string_to_metric_families

from memoryd.services.bootstrap import Stack
from memoryd.shared import subjects
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope
from tests.conftest import StackFactory, unique

pytestmark = pytest.mark.integration

Scrape = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Scrape:
    """Return every sample of a scrape: (name, sorted labels) -> value."""
    found: Scrape = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(scrape: Scrape, name: str, **labels: str) -> float:
    return scrape.get((name, tuple(sorted(labels.items()))), 0.0)


async def scrape(http: httpx.AsyncClient) -> Scrape:
    response = await http.get("/metrics")
    assert 200 == response.status_code
    return samples(response.text)


@pytest.fixture
async def stack(make_stack: StackFactory) -> Stack:
    return await make_stack(changes={"metrics_port": 0, "metrics_interval_seconds": 0.1})


async def test_a_running_stack_is_healthy_ready_and_measured(stack: Stack) -> None:
    """Probes answer 200; lag, applied events, dead letters, recall latency, queues are exported."""
    assert stack.operations is not None
    scope = Scope(tenant=unique("t"), user_id="alice")
    base = f"http://127.0.0.1:{stack.operations.port}"
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        assert "ok\n" == (await http.get("/healthz")).text
        assert 200 == (await http.get("/readyz")).status_code
        before = await scrape(http)
        async with await MemoryClient.connect(stack.nats_url) as client:
            for number in range(3):
                await client.record_turn(scope, f"question {number}", f"answer {number}")
            nc = await nats.connect(stack.nats_url)
            await nc.jetstream().publish(
                subjects.event_subject(scope, "turn.recorded.v1"), b"{not json"
            )
            await nc.close()
            await client.wait_until_applied(timeout=60)
            await client.recall(scope, "question", timeout=30)
            await asyncio.sleep(0.5)  # a refresh of lag and dead letters
            after = await scrape(http)
        missing = await http.get("/nope")

    stm = subjects.STM_CONSUMER
    applied = value(after, "memoryd_events_applied_total", consumer=stm)
    applied -= value(before, "memoryd_events_applied_total", consumer=stm)
    assert applied >= 3  # the turns (and the derived events the STM folds)
    assert 0 == value(after, "memoryd_consumer_lag", consumer=stm)
    assert value(after, "memoryd_projection_position", consumer=stm) > 0
    assert value(after, "memoryd_dead_letters", consumer=stm) >= 1
    recalls = value(after, "memoryd_recall_seconds_count", outcome="ok")
    assert recalls - value(before, "memoryd_recall_seconds_count", outcome="ok") >= 1
    assert ("memoryd_embedder_queue_texts", (("model", "queries"),)) in after
    assert value(after, "process_resident_memory_bytes") > 0
    assert 404 == missing.status_code
