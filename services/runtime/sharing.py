"""A long fold gives the event loop a turn now and then, so recall is not held behind it.

Every component of `memoryd up` shares one event loop, and a projection folds a batch as one
coroutine: between two of its awaits that reach I/O nothing else runs. Recall's visits,
folded every ten seconds, can promote dozens of segments at once, and the persona projection
then extracts from each promotion's pages without once reaching I/O (the offline extractor
and the decision log's publish do not wait): on a slow machine, profiled (py-spy slows it),
one such batch held the loop for 375 ms and the recalls behind it took up to 1.3 s; unprofiled,
recalls there came back in 120-350 ms bursts every ten seconds (5,000 turns, one caller).
``interleaved`` hands the loop over once ``SLICE_SECONDS`` of work have passed, so a waiting
request runs within about that; the fold's own work is unchanged.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from typing import TypeVar

T = TypeVar("T")

SLICE_SECONDS = 0.005


async def interleaved(items: Iterable[T], every: float = SLICE_SECONDS) -> AsyncIterator[T]:
    """Yield ``items`` in order; before the next one, give the event loop a turn whenever
    ``every`` seconds have passed since the last (an item's own awaits do not count)."""
    since = time.perf_counter()
    for item in items:
        yield item
        now = time.perf_counter()
        if now - since >= every:
            await asyncio.sleep(0)
            since = time.perf_counter()
