"""A fresh embedded nats-server in a temporary folder: each benchmark starts from nothing."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from memoryd.shared.adapters.embedded_nats import EmbeddedNats


@contextlib.asynccontextmanager
async def embedded_nats(prefix: str) -> AsyncIterator[tuple[Path, str]]:
    """Yield a temporary data folder and the URL of a nats-server keeping its log there."""
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        server = EmbeddedNats(Path(folder) / "nats")
        await server.astart()
        try:
            yield Path(folder), server.url
        finally:
            await server.astop()
