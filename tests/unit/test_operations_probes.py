"""/healthz and /readyz answer from the probe: the loop's heartbeat and the last checks."""

from __future__ import annotations

from typing import Any
from wsgiref.util import setup_testing_defaults

from memoryd.services.runtime.operations import STALL_SECONDS, Probe, readiness_failures, wsgi_app


def get(probe: Probe, path: str) -> tuple[str, str]:
    environ: dict[str, Any] = {"PATH_INFO": path}
    setup_testing_defaults(environ)
    status: list[str] = []
    body = wsgi_app(probe)(environ, lambda s, _headers: status.append(s))
    return status[0], b"".join(body).decode()


def test_a_process_is_ready_once_started_with_every_check_passing() -> None:
    probe = Probe()
    assert ("503 Service Unavailable", "starting\n") == get(probe, "/readyz")
    probe.started, probe.failures = True, readiness_failures(True, None)
    assert ("200 OK", "ready\n") == get(probe, "/readyz")


def test_readiness_names_what_fails() -> None:
    probe = Probe(started=True, failures=readiness_failures(False, "OperationalError"))
    status, body = get(probe, "/readyz")
    assert "503 Service Unavailable" == status
    assert "NATS not connected\nSQL: OperationalError\n" == body


def test_a_stalled_event_loop_is_unhealthy_and_not_ready() -> None:
    probe = Probe(started=True, failures=())
    assert ("200 OK", "ok\n") == get(probe, "/healthz")
    probe.heartbeat -= STALL_SECONDS + 1
    assert "503 Service Unavailable" == get(probe, "/healthz")[0]
    assert "event loop stalled" in get(probe, "/readyz")[1]
