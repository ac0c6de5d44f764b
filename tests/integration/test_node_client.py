"""A Node client written only from schemas/asyncapi.json publishes, is notified and recalls.

It uses the `nats` npm package (installed into tests/node by `npm ci` when missing). The
document gives it every subject, the de-duplication header and the payload fields; the test
checks the stack stored the turn once, notified it, recalled it, and refused a malformed and
a cross-tenant request with the contracts' error codes.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from memoryd.services.bootstrap import Stack
from memoryd.shared.contracts.schema_export import ASYNCAPI_FILE
from tests.conftest import unique

pytestmark = pytest.mark.integration

NODE_DIR = Path(__file__).parent.parent / "node"
DOCUMENT = Path(__file__).parent.parent.parent / "schemas" / ASYNCAPI_FILE


@pytest.fixture(scope="module")
def node_client() -> Path:
    """Return the client script, its npm dependencies installed (npm ci, pinned by the lock)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js and npm are needed for the Node client test")
    if not (NODE_DIR / "node_modules" / "nats").is_dir():
        subprocess.run(
            ["npm", "ci", "--silent", "--no-audit", "--no-fund"],
            cwd=NODE_DIR,
            check=True,
            capture_output=True,
            timeout=300,
        )
    return NODE_DIR / "client.mjs"


def _run(script: Path, url: str, tenant: str, other: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["node", str(script), url, str(DOCUMENT), tenant, "alice", other],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


async def test_a_node_client_from_the_asyncapi_document_publishes_is_notified_and_recalls(
    stack: Stack, node_client: Path
) -> None:
    done = await asyncio.to_thread(_run, node_client, stack.nats_url, unique("t"), unique("t"))

    assert 0 == done.returncode, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["stored"] > 0 and result["duplicate"] is True  # the same id stored once
    assert "page.added" == result["notified"]
    assert any("Porto" in page for page in result["pages"])
    assert "Porto" in result["context"]
    assert "invalid_request" == result["bad"]
    assert "forbidden" == result["foreign"]
