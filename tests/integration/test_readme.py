"""README.md's Python samples run as written against a running memoryd.

Every ```python block of the README runs in its own interpreter, the way a reader pastes it
into ``python -m asyncio`` in the project's activated environment (top-level ``await``
allowed; a plain script runs too; the ``memoryd`` command on the PATH). The one change: the
samples connect to the embedded default, ``nats://127.0.0.1:14222``, and the test substitutes
the URL of the test stack for it. A block that talks to the MCP server over HTTP
(``http://127.0.0.1:8765/mcp``) gets one, started as the README says with the token file of the
README's MCP section, on a free port substituted likewise; a block that talks to the HTTP API
(``http://127.0.0.1:8080``) gets `memoryd http` with the token file of its section. ```bash
blocks are set-up commands and do not run; the MCP client configuration (the ```json block of
``mcpServers``) is started as a client would. A block that raises, or does not finish within
``BLOCK_TIMEOUT`` seconds (a sample waiting for something that never comes), fails the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from memoryd.services.bootstrap import Stack
from memoryd.shared.adapters.embedded_nats import _port_open, free_port

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"
SAMPLE_URL = "nats://127.0.0.1:14222"
BLOCK_TIMEOUT = 120.0
SAMPLE_MCP_URL = "http://127.0.0.1:8765/mcp"
SAMPLE_API_URL = "http://127.0.0.1:8080"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
JSON_BLOCK = re.compile(r"^```json\n(.*?)^```", re.DOTALL | re.MULTILINE)
# The console scripts of the interpreter running the tests (an activated venv has them).
SCRIPTS = str(Path(sys.executable).parent)

# Run a block as the asyncio REPL would: compiled with top-level await, awaited if it needs to.
RUNNER = """
import ast, asyncio, inspect, sys
source = sys.stdin.read()
code = compile(source, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
namespace = {"__name__": "__main__"}
result = eval(code, namespace)
if inspect.iscoroutine(result):
    asyncio.run(result)
"""


def python_blocks() -> list[str]:
    """Return the README's ```python blocks, in order."""
    return PYTHON_BLOCK.findall(README.read_text())


def test_readme_has_python_samples() -> None:
    """The README shows the SDK in at least one Python block that connects to the default."""
    blocks = python_blocks()
    assert blocks
    assert any(SAMPLE_URL in block for block in blocks)


def json_blocks(text: str | None = None) -> list[Any]:
    """Return the ```json blocks of ``text`` (default: the whole README), parsed."""
    return [json.loads(block) for block in JSON_BLOCK.findall(text or README.read_text())]


def section(title: str) -> str:
    """Return the README's ``## title`` section, up to the next ``## `` heading."""
    _, _, rest = README.read_text().partition(f"\n## {title}\n")
    assert rest, f"README has no section {title!r}"
    return rest.split("\n## ", 1)[0]


def token_map(title: str) -> Any:
    """Return the one token file a README section shows."""
    (tokens,) = [block for block in json_blocks(section(title)) if is_token_map(block)]
    return tokens


def is_token_map(block: Any) -> bool:
    """Say whether a JSON block is an MCP token file: tokens to scopes."""
    return (
        isinstance(block, dict)
        and bool(block)
        and all(isinstance(scope, dict) and "tenant" in scope for scope in block.values())
    )


def readme_env() -> dict[str, str]:
    """Return the environment of a reader's activated venv: its scripts first on the PATH."""
    return {**os.environ, "PATH": f"{SCRIPTS}{os.pathsep}{os.environ.get('PATH', '')}"}


@contextlib.contextmanager
def readme_server(command: list[str], env: dict[str, str], port: int, log: Path) -> Iterator[None]:
    """Run one of the README's server commands until the block is done."""
    with log.open("ab") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not _port_open("127.0.0.1", port):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield
    finally:
        process.terminate()
        process.wait(10)


@contextlib.contextmanager
def readme_http_server(nats_url: str, tmp_path: Path) -> Iterator[str]:
    """Start `memoryd mcp --transport http` with the README's token file; yield its URL."""
    tokens_file = tmp_path / "mcp-tokens.json"
    tokens_file.write_text(json.dumps(token_map("Agents: MCP")))
    port = free_port()
    env = {
        **readme_env(),
        "MEMORYD_NATS_URL": nats_url,
        "MEMORYD_MCP_TOKENS_FILE": str(tokens_file),
    }
    command = ["memoryd", "mcp", "--transport", "http", "--port", str(port)]
    with readme_server(command, env, port, tmp_path / "mcp-http.log"):
        yield SAMPLE_MCP_URL.replace("8765", str(port))


@contextlib.contextmanager
def readme_api_server(nats_url: str, tmp_path: Path) -> Iterator[str]:
    """Start `memoryd http` with the token file of the README's HTTP API section."""
    tokens_file = tmp_path / "http-tokens.json"
    tokens_file.write_text(json.dumps(token_map("HTTP API")))
    port = free_port()
    env = {
        **readme_env(),
        "MEMORYD_NATS_URL": nats_url,
        "MEMORYD_HTTP_TOKENS_FILE": str(tokens_file),
    }
    with readme_server(["memoryd", "http", "--port", str(port)], env, port, tmp_path / "h.log"):
        yield SAMPLE_API_URL.replace("8080", str(port))


async def run_block(
    block: str, nats_url: str, mcp_url: str = SAMPLE_MCP_URL, api_url: str = SAMPLE_API_URL
) -> str:
    """Run one block in a fresh interpreter against ``nats_url``; return its output."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        RUNNER,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=readme_env(),
    )
    source = (
        block.replace(SAMPLE_URL, nats_url)
        .replace(SAMPLE_MCP_URL, mcp_url)
        .replace(SAMPLE_API_URL, api_url)
        .encode()
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(source), BLOCK_TIMEOUT)
    except TimeoutError:
        process.kill()
        output, _ = await process.communicate()
        pytest.fail(f"README block hung for {BLOCK_TIMEOUT:.0f} s:\n{block}\n{output.decode()}")
    assert 0 == process.returncode, f"README block failed:\n{block}\n{output.decode()}"
    return output.decode()


# The samples exercise the SDK, not the database: one backend is enough.
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("index", range(len(python_blocks())))
async def test_readme_python_block_runs(stack: Stack, index: int, tmp_path: Path) -> None:
    """Each Python block of the README runs to its end against a running memoryd."""
    block = python_blocks()[index]
    with contextlib.ExitStack() as servers:
        mcp_url, api_url = SAMPLE_MCP_URL, SAMPLE_API_URL
        if SAMPLE_MCP_URL in block:
            mcp_url = servers.enter_context(readme_http_server(stack.nats_url, tmp_path))
        if SAMPLE_API_URL in block:
            api_url = servers.enter_context(readme_api_server(stack.nats_url, tmp_path))
        output = await run_block(block, stack.nats_url, mcp_url, api_url)
    assert "Traceback" not in output


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_readme_mcp_client_configuration_starts_the_server(
    stack: Stack, tmp_path: Path
) -> None:
    """The README's mcpServers entry, as an MCP client would start it, serves the six tools."""
    (config,) = [block for block in json_blocks() if "mcpServers" in block]
    entry = config["mcpServers"]["memoryd"]
    env = {**entry["env"], "MEMORYD_NATS_URL": stack.nats_url, "PATH": readme_env()["PATH"]}
    server = StdioServerParameters(command=entry["command"], args=entry["args"], env=env)

    with (tmp_path / "mcp.log").open("w") as errors:
        async with (
            stdio_client(server, errlog=errors) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = await session.list_tools()

    assert 6 == len(tools.tools)
