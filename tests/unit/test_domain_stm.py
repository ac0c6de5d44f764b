"""The STM FIFO."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from memoryd.shared.domain.stm import Page, append_page


def page(n: int) -> Page:
    """Return the n-th page of a conversation."""
    return Page(uuid.uuid4(), None, "default", f"q{n}", f"r{n}", datetime.now(UTC), n)


def test_the_eighth_page_evicts_the_first() -> None:
    """With capacity 7, appending an 8th page pushes out the oldest."""
    fifo: tuple[Page, ...] = ()
    pages = [page(n) for n in range(8)]
    evictions = []
    for p in pages:
        fifo, evicted = append_page(fifo, p, 7)
        evictions.extend(evicted)
    assert pages[1:] == list(fifo)
    assert [pages[0]] == evictions


@given(st.integers(min_value=0, max_value=40), st.integers(min_value=1, max_value=10))
def test_the_fifo_keeps_the_newest_pages_and_evicts_the_rest_in_order(
    count: int, capacity: int
) -> None:
    """Whatever the count, the FIFO holds the newest `capacity` pages; evictions are the rest."""
    fifo: tuple[Page, ...] = ()
    pages = [page(n) for n in range(count)]
    evictions = []
    for p in pages:
        fifo, evicted = append_page(fifo, p, capacity)
        evictions.extend(evicted)
    assert pages[max(0, count - capacity) :] == list(fifo)
    assert pages[: max(0, count - capacity)] == evictions
