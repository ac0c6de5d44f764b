"""memoryd refuses what cannot work at once, with one line naming the setting to change."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.shared.adapters.embedded_nats import EmbeddedNats, free_port
from memoryd.shared.adapters.index.edge import EdgeSearchIndex
from memoryd.shared.client import MemoryClient

pytestmark = pytest.mark.integration

# Long enough for a slow start-up on a busy machine; the behaviour under test takes seconds.
PATIENCE_SECONDS = 90


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "MEMORYD_DATA_DIR": str(tmp_path / "data"),
        "MEMORYD_NATS_URL": "",
        "MEMORYD_DATABASE_URL": "",
        "MEMORYD_EMBEDDED_NATS_PORT": str(free_port()),
        "MEMORYD_CONNECT_TIMEOUT_SECONDS": "2",
        "MEMORYD_LOG_FORMAT": "console",
    }
    env.update(extra)
    return env


def run_memoryd(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``memoryd <args>`` to its end (failing the test if it hangs)."""
    return subprocess.run(
        [sys.executable, "-m", "memoryd.services.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=PATIENCE_SECONDS,
    )


def refused_with_one_line(result: subprocess.CompletedProcess[str]) -> str:
    """Assert memoryd exited non-zero with no traceback and one line of output; return it."""
    output = (result.stdout + result.stderr).strip()
    assert 0 != result.returncode, output
    assert "Traceback" not in output, output
    assert 1 == len(output.splitlines()), output
    return output


@pytest.fixture
def dead_port() -> int:
    """Return a port nothing listens on."""
    return free_port()


@pytest.fixture
def busy_port() -> Iterator[int]:
    """Yield a port a plain TCP listener holds (it accepts connections and never answers)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield int(listener.getsockname()[1])


# --- a dead NATS URL ------------------------------------------------------------------
async def test_connect_to_a_dead_port_fails_within_the_timeout(dead_port: int) -> None:
    """MemoryClient.connect gives up after its timeout, naming the URL and the setting."""
    url = f"nats://127.0.0.1:{dead_port}"
    with pytest.raises(ConnectionError) as refused:
        # The outer bound only keeps a hang from stalling the suite.
        await asyncio.wait_for(MemoryClient.connect(url, timeout=1.0), PATIENCE_SECONDS)
    message = str(refused.value)
    assert url in message
    assert "MEMORYD_NATS_URL" in message


@pytest.mark.parametrize("command", [["dead-letters"], ["demo"]])
def test_cli_on_a_dead_nats_url_exits_with_one_line(
    command: list[str], dead_port: int, tmp_path: Path
) -> None:
    """A CLI command pointed at a dead NATS exits non-zero with one line, no traceback."""
    url = f"nats://127.0.0.1:{dead_port}"
    result = run_memoryd(command, _env(tmp_path, MEMORYD_NATS_URL=url))
    line = refused_with_one_line(result)
    assert url in line
    assert "MEMORYD_NATS_URL" in line


# --- the embedded port taken ----------------------------------------------------------
def test_up_on_a_taken_port_exits_with_one_line(busy_port: int, tmp_path: Path) -> None:
    """`memoryd up` whose port something else holds names MEMORYD_EMBEDDED_NATS_PORT."""
    result = run_memoryd(["up"], _env(tmp_path, MEMORYD_EMBEDDED_NATS_PORT=str(busy_port)))
    line = refused_with_one_line(result)
    assert "MEMORYD_EMBEDDED_NATS_PORT" in line
    assert str(busy_port) in line


def test_demo_on_a_port_held_by_something_else_exits_with_one_line(
    busy_port: int, tmp_path: Path
) -> None:
    """`memoryd demo` does not hang on a port that is not memoryd's NATS: it says so."""
    result = run_memoryd(["demo"], _env(tmp_path, MEMORYD_EMBEDDED_NATS_PORT=str(busy_port)))
    line = refused_with_one_line(result)
    assert "MEMORYD_EMBEDDED_NATS_PORT" in line


def test_demo_says_which_running_memoryd_it_plays_into(tmp_path: Path) -> None:
    """`memoryd demo` beside a running memoryd names its URL and data folder first."""
    data = tmp_path / "data"
    with EmbeddedNats(tmp_path / "nats", port=free_port()) as server:
        data.mkdir()
        (data / "nats.url").write_text(server.url + "\n")  # as `memoryd up` writes it
        env = _env(tmp_path, MEMORYD_EMBEDDED_NATS_PORT=str(server.port))
        demo = subprocess.Popen(
            [sys.executable, "-m", "memoryd.services.cli", "demo"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert demo.stdout is not None
            first = demo.stdout.readline()  # the demo then waits for workers: not tested here
        finally:
            demo.kill()
            demo.wait(10)
    assert f"playing into the memoryd already running at {server.url}" in first
    assert f"data folder {data.resolve()}" in first


# --- embeddings that cannot work ------------------------------------------------------
BLOCK_MODULE = """
import importlib.abc
import sys

BLOCKED = {module!r}


class _Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == BLOCKED or name.startswith(BLOCKED + "."):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _Blocked())
"""


def _refused_at_start(env: dict[str, str], tmp_path: Path) -> str:
    """Run `memoryd up`; assert it refuses to start (never says it is up); return its output."""
    log = tmp_path / "up.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "memoryd.services.cli", "up"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        deadline = time.monotonic() + PATIENCE_SECONDS
        while process.poll() is None and "memoryd is up" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
    output = log.read_text()
    assert "memoryd is up" not in output, output
    assert 0 != process.returncode, output
    assert "Traceback" not in output, output
    last = output.strip().splitlines()[-1]
    assert last.startswith("memoryd: "), output
    return last


@pytest.mark.parametrize(
    ("runtime", "module"),
    [("openvino", "openvino"), ("onnx", "onnxruntime"), ("torch", "sentence_transformers")],
)
def test_up_without_the_local_extra_refuses_to_start(
    tmp_path: Path, runtime: str, module: str
) -> None:
    """Without the runtime's package `memoryd up` refuses at once, naming memoryd[local]."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCK_MODULE.format(module=module))
    env = _env(tmp_path, PYTHONPATH=str(blocker), MEMORYD_EMBEDDING_RUNTIME=runtime)
    line = _refused_at_start(env, tmp_path)
    assert "memoryd[local]" in line
    assert module in line


async def test_up_with_an_index_of_another_width_refuses_to_start(tmp_path: Path) -> None:
    """An index built for 8-dimensional vectors stops a 384-dimensional MiniLM at start."""
    index = EdgeSearchIndex(tmp_path / "data" / "index", 8)
    await index.ensure_collection()
    await index.close()
    line = await asyncio.to_thread(_refused_at_start, _env(tmp_path), tmp_path)
    assert "384" in line
    assert str(tmp_path / "data" / "index") in line
    assert "MEMORYD_EMBEDDING_MODEL" in line


def test_openai_embeddings_without_a_base_url_are_refused(tmp_path: Path) -> None:
    """MEMORYD_EMBEDDING_KIND=openai alone would target the public API: refused at once."""
    result = run_memoryd(["up"], _env(tmp_path, MEMORYD_EMBEDDING_KIND="openai"))
    line = refused_with_one_line(result)
    assert "MEMORYD_EMBEDDING_BASE_URL" in line


# --- memoryd mcp without a scope to serve ---------------------------------------------
@pytest.mark.parametrize(
    ("transport", "extra", "expected"),
    [
        ("stdio", {}, "set MEMORYD_MCP_TENANT and MEMORYD_MCP_USER"),
        ("stdio", {"MEMORYD_MCP_TENANT": "acme", "MEMORYD_MCP_USER": "a.b"}, "user_id: String"),
        ("http", {}, "set MEMORYD_MCP_TOKENS_FILE to a JSON file of tokens to scopes"),
    ],
)
def test_mcp_without_a_valid_scope_refuses_to_start(
    transport: str, extra: dict[str, str], expected: str, tmp_path: Path
) -> None:
    """`memoryd mcp` names the setting that binds its scope instead of serving without one."""
    result = run_memoryd(["mcp", "--transport", transport], _env(tmp_path, **extra))

    assert expected in refused_with_one_line(result)


def test_mcp_refuses_a_token_file_with_a_short_token_without_showing_it(tmp_path: Path) -> None:
    """A guessable token is refused by its position in the file; the token is not printed."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"letmein": {"tenant": "acme", "user_id": "alice"}}')

    line = refused_with_one_line(
        run_memoryd(
            ["mcp", "--transport", "http"], _env(tmp_path, MEMORYD_MCP_TOKENS_FILE=str(tokens))
        )
    )

    assert "token #1 is shorter than 16 characters" in line
    assert "letmein" not in line
