"""`memoryd status`, `remember`, `recall` and `forget` for people at a terminal, run as typed."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from memoryd.services.bootstrap import Stack
from memoryd.shared import subjects
from memoryd.shared.client import MemoryClient
from tests.conftest import unique

pytestmark = pytest.mark.integration


async def memoryd(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the command in a thread: the stack it talks to runs on this test's event loop."""
    return await asyncio.to_thread(_run, stack, *args)


def _run(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "MEMORYD_NATS_URL": stack.nats_url,
        "MEMORYD_LOG_FORMAT": "console",
        "COLUMNS": "200",  # rich wraps to the terminal width
    }
    return subprocess.run(
        [sys.executable, "-m", "memoryd.services.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_a_person_remembers_recalls_and_forgets(stack: Stack, client: MemoryClient) -> None:
    tenant = unique("t")
    who = ["--tenant", tenant, "--user", "alice"]

    stored = await memoryd(
        stack, "remember", "Alice's locker code is 4711", "--key", "locker", *who
    )
    await client.wait_until_applied(timeout=60)
    found = await memoryd(stack, "recall", "locker code", "--explain", *who)
    gone = await memoryd(stack, "forget", "--key", "locker", *who)
    await client.wait_until_applied(timeout=60)
    after = await memoryd(stack, "recall", "locker code", *who)
    status = await memoryd(stack, "status")
    other = await memoryd(
        stack, "recall", "locker code", "--tenant", unique("t"), "--user", "alice"
    )

    assert 0 == stored.returncode, stored.stderr
    assert "remembered" in stored.stdout and "key locker" in stored.stdout
    assert "4711" in found.stdout and "bm25 #" in found.stdout  # the explain column
    assert "forgot key locker" in gone.stdout
    assert "4711" not in after.stdout
    assert "4711" not in other.stdout  # another tenant's recall sees nothing of alice's
    for consumer in subjects.PROJECTION_CONSUMERS:
        assert consumer in status.stdout
    assert "the log holds" in status.stdout


async def test_a_bad_scope_is_refused_in_one_line(stack: Stack) -> None:
    refused = await memoryd(stack, "recall", "anything", "--tenant", "a.b", "--user", "alice")
    assert 0 != refused.returncode
    assert "tenant" in refused.stderr and "Traceback" not in refused.stderr
