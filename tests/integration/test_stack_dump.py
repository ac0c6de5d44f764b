"""`kill -USR1` on a running memoryd writes every thread's stack to its output; it keeps running."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.integration.test_processes import clean_log, memoryd_process, worker_env

pytestmark = pytest.mark.integration


async def _logged(log: Path, text: str, timeout: float = 60.0) -> bool:
    for _ in range(int(timeout / 0.1)):
        if text in await asyncio.to_thread(log.read_text, errors="replace"):
            return True
        await asyncio.sleep(0.1)
    return False


async def test_sigusr1_writes_every_threads_stack_and_memoryd_keeps_running(
    nats_url: str, tmp_path: Path
) -> None:
    nc, _ = await clean_log(nats_url)
    await nc.close()
    log = tmp_path / "memoryd.log"
    with memoryd_process(["up", "--components", "stm"], worker_env(nats_url, tmp_path), log) as up:
        assert await _logged(log, "memoryd is up")
        up.send_signal(signal.SIGUSR1)

        assert await _logged(log, "most recent call first")
        text = await asyncio.to_thread(log.read_text, errors="replace")
        assert "Thread 0x" in text  # every thread, not only the one the signal landed on
        assert "run_until_complete" in text  # the main thread, in its event loop
        await asyncio.sleep(0.5)
        assert up.poll() is None
