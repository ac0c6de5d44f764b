"""`memoryd export` and `memoryd import`: a user's memory carried to a fresh memoryd, once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd.services.bootstrap import Stack
from memoryd.shared.adapters.nats_log import last_sequence
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope
from tests.conftest import StackFactory, unique

pytestmark = pytest.mark.integration


def _run(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMORYD_NATS_URL": stack.nats_url, "MEMORYD_LOG_FORMAT": "console"}
    return subprocess.run(
        [sys.executable, "-m", "memoryd.services.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def memoryd(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the command in a thread: the stack it talks to runs on this test's event loop."""
    return await asyncio.to_thread(_run, stack, *args)


async def test_an_export_imported_into_a_fresh_memoryd_gives_the_same_memories(
    make_stack: StackFactory, tmp_path: Path
) -> None:
    tenant = unique("t")
    alice, bob = Scope(tenant=tenant, user_id="alice"), Scope(tenant=tenant, user_id="bob")
    source = await make_stack()
    async with await MemoryClient.connect(source.nats_url) as client:
        await client.record_turn(alice, "I adopted a greyhound called Pip", "Lovely!")
        await client.remember(alice, "Alice is vegetarian", key="diet")
        await client.remember(alice, "Alice drinks oat milk", key="milk")
        await client.forget(alice, key="milk")
        await client.remember(bob, "Bob's secret", key="secret")
        await client.wait_until_applied(timeout=60)
    exported = tmp_path / "alice.jsonl"
    done = await memoryd(
        source, "export", "--tenant", tenant, "--user", "alice", "--out", str(exported)
    )
    assert 0 == done.returncode, done.stderr
    records = [json.loads(line) for line in exported.read_text().splitlines()]
    assert ["Alice is vegetarian"] == [
        r["memory"]["content"] for r in records if r["record"] == "memory"
    ]
    assert "Bob's secret" not in exported.read_text()

    await source.stop()
    target = await make_stack(changes={"data_dir": tmp_path / "target"})  # a fresh log, database
    first = await memoryd(target, "import", str(exported))
    async with await MemoryClient.connect(target.nats_url) as client:
        await client.wait_until_applied(timeout=60)
        held = await last_sequence(target.js, target.settings.stream_name)
        second = await memoryd(target, "import", str(exported))
        await client.wait_until_applied(timeout=60)
        memories = await client.list_memories(alice)
        recalled = await client.recall(alice, "greyhound", timeout=30)

    assert "imported 4 events" in first.stdout, first.stderr
    assert "imported 0 events (4 already in the log" in second.stdout, second.stderr
    assert held == await last_sequence(target.js, target.settings.stream_name)
    assert ["Alice is vegetarian"] == [m.content for m in memories.memories]
    assert any("Pip" in page.query for page in recalled.pages)


async def test_a_file_that_is_no_export_is_refused_and_publishes_nothing(
    stack: Stack, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"record": "event", "event": {"type": "turn.recorded.v1"}}\n')
    before = await last_sequence(stack.js, stack.settings.stream_name)
    done = await memoryd(stack, "import", str(bad))
    assert 2 == done.returncode
    assert "is not a memoryd export" in done.stderr and "Traceback" not in done.stderr
    assert before == await last_sequence(stack.js, stack.settings.stream_name)
