"""A topology process that never gets ready is named within the wait, with the end of its log and
where each of its threads waits (it is asked with SIGUSR1, as `memoryd` registers)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memoryd.services.cluster import ComponentProcess, Topology
from memoryd.shared.adapters.embedded_nats import free_port
from memoryd.shared.settings import StartupError

# What `memoryd` registers at start, then a start-up that never ends.
STUCK = """
import faulthandler, signal
faulthandler.register(signal.SIGUSR1, all_threads=True)
print('edge_index.created', flush=True)
def loading_the_models():
    input()
loading_the_models()
"""


def _spawn(code: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def test_a_process_that_never_gets_ready_is_named_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "index-recall.log"
    # Alive, never answering /readyz: what a process stuck in its start-up looks like.
    stuck = ComponentProcess("index-recall", ("indexer", "recall"), {}, log, free_port())
    stuck.process = _spawn(STUCK, log)
    topology = Topology(tmp_path, "postgresql+asyncpg://unused")
    topology.processes["index-recall"] = stuck
    try:
        with pytest.raises(StartupError) as refused:
            await topology.wait_ready(timeout=1.0)
    finally:
        stuck.kill()

    message = str(refused.value)
    assert "index-recall not ready" in message
    assert "edge_index.created" in message
    assert str(log) in message
    assert "loading_the_models" in message  # where it waits
