"""README.md's Python samples run as written against a running memoryd.

Every ```python block of the README runs in its own interpreter, the way a reader pastes it
into ``python -m asyncio`` (top-level ``await`` allowed; a plain script runs too). The one
change: the samples connect to the embedded default, ``nats://127.0.0.1:14222``, and the test
substitutes the URL of the test stack for it. ```bash blocks are set-up commands and do not
run. A block that raises, or does not finish within ``BLOCK_TIMEOUT`` seconds (a sample
waiting for something that never comes), fails the test.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

from memoryd.services.bootstrap import Stack

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"
SAMPLE_URL = "nats://127.0.0.1:14222"
BLOCK_TIMEOUT = 120.0
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)

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


async def run_block(block: str, nats_url: str) -> str:
    """Run one block in a fresh interpreter against ``nats_url``; return its output."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        RUNNER,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    source = block.replace(SAMPLE_URL, nats_url).encode()
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
async def test_readme_python_block_runs(stack: Stack, index: int) -> None:
    """Each Python block of the README runs to its end against a running memoryd."""
    output = await run_block(python_blocks()[index], stack.nats_url)
    assert "Traceback" not in output
