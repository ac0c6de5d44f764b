"""Ports for spawned servers, and why a spawned nats-server exited, told to whoever started it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from memoryd.shared.adapters.embedded_nats import EmbeddedNats, ephemeral_range, free_ports
from memoryd.shared.settings import StartupError

pytestmark = pytest.mark.integration


def test_ports_for_servers_are_distinct_bindable_and_outside_the_ephemeral_range() -> None:
    # A port inside the ephemeral range can be taken by any outgoing connection (a cluster
    # node dialling a peer not up yet) between being chosen and being bound by the server.
    ports = free_ports(9)

    assert 9 == len(set(ports))
    low = ephemeral_range()[0]
    if low > 10_000:
        assert all(port < low for port in ports), (ports, low)
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_server_that_exits_at_start_says_why(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monitor = taken.getsockname()[1]
        server = EmbeddedNats(tmp_path / "nats", options={"http": f"127.0.0.1:{monitor}"})

        with pytest.raises(StartupError, match="address already in use"):
            server.start()
    assert not server.running


def _environment_of(server: EmbeddedNats) -> dict[str, str]:
    pid = server.pid_file.read_text().strip()
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(pair.decode().split("=", 1) for pair in pairs if b"=" in pair)


def test_the_server_collects_its_garbage_sooner_unless_told_how(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's Go collector runs at GOGC=50 (a smaller peak heap); a GOGC or GOMEMLIMIT
    in memoryd's environment reaches the server as it is."""
    monkeypatch.delenv("GOGC", raising=False)
    monkeypatch.delenv("GOMEMLIMIT", raising=False)
    with EmbeddedNats(tmp_path / "ours") as ours:
        assert "50" == _environment_of(ours)["GOGC"]
    monkeypatch.setenv("GOMEMLIMIT", "256MiB")
    with EmbeddedNats(tmp_path / "theirs") as theirs:
        told = _environment_of(theirs)
    assert "256MiB" == told["GOMEMLIMIT"]
    assert "GOGC" not in told
