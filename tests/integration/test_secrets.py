"""Known secrets never show: not in logs, error messages, dead letters or the log's events.

`memoryd up` runs as a user runs it, with every secret set: the NATS service password (the
embedded server with tenant auth on), an LLM API key (its stand-in endpoint refuses the key
and echoes it back, as some providers do), a Qdrant and an embedding API key, and a database
password in the URL. A tenant then records turns, sends a malformed event and recalls; a CLI
call with a wrong password is refused. Every output is read and searched for each secret.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import nats
import pytest
from pydantic import SecretStr

from memoryd.shared import subjects
from memoryd.shared.adapters.embedded_nats import free_port
from memoryd.shared.adapters.nats_log import NatsAuth
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope
from memoryd.shared.settings import Settings
from tests.conftest import _reset_database

pytestmark = [pytest.mark.integration, pytest.mark.model]

LLM_KEY = "sk-llm-KNOWN-secret-1a2b3c"
QDRANT_KEY = "qdrant-KNOWN-secret-4d5e6f"
EMBEDDING_KEY = "embed-KNOWN-secret-7a8b9c"
DB_PASSWORD = "pg-KNOWN-secret-0d1e2f"
WRONG_PASSWORD = "wrong-KNOWN-secret-3a4b5c"


@pytest.fixture
def echoing_llm() -> Iterator[tuple[str, list[str]]]:
    """An OpenAI-compatible endpoint that refuses every key and echoes it in the error."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            """Refuse, quoting the key back."""
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            key = self.headers.get("Authorization", "").removeprefix("Bearer ")
            seen.append(key)
            body = json.dumps(
                {"error": {"message": f"Incorrect API key provided: {key}", "code": "bad_key"}}
            ).encode()
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Keep test output quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    server.shutdown()
    thread.join()


def _with_password(url: str, password: str) -> str:
    """Return a database URL carrying ``password`` (trust auth on the test server ignores it)."""
    split = urlsplit(url)
    user = split.username or "postgres"
    return urlunsplit(split._replace(netloc=f"{user}:{password}@{split.hostname}:{split.port}"))


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memoryd.services.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _settings_lines(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {key: value for key, value in pairs if not key.startswith("#")}


def _wait_for(path: Path, text: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 180
    while text not in path.read_text(errors="replace"):
        assert process.poll() is None, path.read_text(errors="replace")[-3_000:]
        assert time.monotonic() < deadline, f"no {text!r} in {path}"
        time.sleep(0.2)


def _start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "memoryd.services.cli", "up"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def _dead_letters(url: str, auth: NatsAuth, stream: str) -> list[str]:
    """Return every dead letter as text: its headers and its bytes."""
    nc = await nats.connect(url, **auth.options())
    js = nc.jetstream()
    found: list[str] = []
    info = await js.stream_info(stream)
    for sequence in range(info.state.first_seq, info.state.last_seq + 1):
        message = await js.get_msg(stream, sequence)
        found.append(json.dumps(message.headers) + (message.data or b"").decode(errors="replace"))
    await nc.close()
    return found


async def test_no_secret_appears_in_any_output(
    tmp_path: Path, echoing_llm: tuple[str, list[str]], postgres_url: str | None
) -> None:
    llm_url, keys_seen = echoing_llm
    base = {**os.environ, "MEMORYD_DATA_DIR": str(tmp_path), "MEMORYD_LOG_FORMAT": "json"}
    tenant = _settings_lines(run(["tenants", "add", "acme"], base).stdout)
    service = _settings_lines((tmp_path / "auth" / "service.env").read_text())
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    database = (
        _with_password(postgres_url, DB_PASSWORD)
        if postgres_url
        else f"sqlite+aiosqlite:///{tmp_path / 'memoryd.db'}"
    )
    env = {
        **base,
        **service,
        "MEMORYD_EMBEDDED_NATS_PORT": str(port),
        "MEMORYD_EMBEDDED_NATS_CONFIG": str(tmp_path / "auth" / "auth.conf"),
        "MEMORYD_DATABASE_URL": database,
        "MEMORYD_LLM_BASE_URL": llm_url,
        "MEMORYD_LLM_API_KEY": LLM_KEY,
        "MEMORYD_LLM_ATTEMPTS": "1",
        "MEMORYD_QDRANT_API_KEY": QDRANT_KEY,
        "MEMORYD_EMBEDDING_API_KEY": EMBEDDING_KEY,
        "MEMORYD_LOG_LEVEL": "DEBUG",
    }
    secrets = [
        LLM_KEY,
        QDRANT_KEY,
        EMBEDDING_KEY,
        WRONG_PASSWORD,
        service["MEMORYD_NATS_PASSWORD"],
        tenant["MEMORYD_NATS_PASSWORD"],
    ] + ([DB_PASSWORD] if postgres_url else [])
    await _reset_database(Settings(database_url=database))  # no read model of another run
    log = tmp_path / "memoryd.log"
    process = _start(env, log)
    outputs: list[str] = []
    try:
        await asyncio.to_thread(_wait_for, log, "memoryd is up", process)
        auth = NatsAuth(
            tenant["MEMORYD_NATS_USER"], SecretStr(tenant["MEMORYD_NATS_PASSWORD"]), "acme"
        )
        alice = Scope(tenant="acme", user_id="alice")
        async with await MemoryClient.connect(url, auth=auth) as client:
            turn = await client.record_turn(alice, "I moved to Porto last May", "Nice city!")
            await client.recallable(turn, timeout=120, scope=alice)
            await client.recall(alice, "where do I live", timeout=30)
            nc = await nats.connect(url, **auth.options())
            await nc.jetstream().publish(
                subjects.event_subject(alice, "turn.recorded.v1"), b"{broken", timeout=10
            )
            await nc.close()
            await client.wait_until_applied(timeout=120, scope=alice)
        refused = run(["dead-letters"], {**env, "MEMORYD_NATS_PASSWORD": WRONG_PASSWORD})
        listed = run(["dead-letters"], env)
        outputs += [refused.stdout + refused.stderr, listed.stdout + listed.stderr]
        service_auth = NatsAuth(
            service["MEMORYD_NATS_USER"], SecretStr(service["MEMORYD_NATS_PASSWORD"])
        )
        letters = await _dead_letters(url, service_auth, "MEMORYD_DLQ")
        events = await _dead_letters(url, service_auth, "MEMORYD")
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(60)

    assert refused.returncode == 2 and "refused" in refused.stderr
    assert letters, "the malformed event was not dead-lettered"
    assert any(LLM_KEY in key for key in keys_seen), "the LLM key never reached the endpoint"
    outputs += [log.read_text(errors="replace"), *letters, *events]
    outputs += [p.read_text(errors="replace") for p in (tmp_path / "nats").glob("*.log")]
    for secret in secrets:
        leaks = [text for text in outputs if secret in text]
        assert not leaks, f"{secret} appears in: {leaks[0][:2_000]}"
