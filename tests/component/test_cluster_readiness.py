"""A topology process that never gets ready is named, with the end of its log, within the wait."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memoryd.services.cluster import ComponentProcess, Topology
from memoryd.shared.adapters.embedded_nats import free_port
from memoryd.shared.settings import StartupError


async def test_a_process_that_never_gets_ready_is_named_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "index-recall.log"
    # Alive, never answering /readyz: what a process stuck in its start-up looks like.
    stuck = ComponentProcess("index-recall", ("indexer", "recall"), {}, log, free_port())
    with log.open("wb") as out:
        stuck.process = subprocess.Popen(
            [sys.executable, "-c", "print('edge_index.created', flush=True); input()"],
            stdin=subprocess.PIPE,
            stdout=out,
        )
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
