"""State a projection keeps in memory between its batches, trusted only at its own position.

A projection that reads per-user state for every batch can keep what its last committed batch
left instead. MTM read every segment of every user in a batch, decoded from JSON with its
vector: with 100 users' turns interleaved, a quarter of the event loop's time (py-spy, `bench
peers --users 100`), where one user's turns cost almost nothing.

What is held for a consumer is trusted while that consumer's position, read under the tracking
row's lock when a batch begins, is the one this process committed last: anything else that
changes the read models (another process on the same consumer, a replay, a rebuild) moves or
resets the position, and then everything held for the consumer is dropped. A batch's changes
are staged and kept only once its transaction has committed; a batch that fails leaves the
position unknown, so the next one starts from SQL. A projection reads and stages through the
batch open in its context (``apply_once`` opens it): outside one it reads nothing held and
stages nothing, so a fold called on its own reads SQL as before.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(slots=True)
class HeldBatch(Generic[K, V]):
    """One batch's view: the consumer it runs under, and what it staged (None: forget)."""

    consumer: str
    staged: dict[K, V | None] = field(default_factory=dict)


class HeldState(Generic[K, V]):
    """Values by key, each held for the consumer that committed it, at most ``max_items``
    items in all (``size`` counts a value's items; the least recently used go first)."""

    def __init__(self, max_items: int, size: Callable[[V], int] = lambda _: 1) -> None:
        """Hold at most ``max_items`` items (0: hold nothing)."""
        self._max_items = max_items
        self._size = size
        self._entries: OrderedDict[K, tuple[str, V]] = OrderedDict()
        self._items = 0
        self._positions: dict[str, int] = {}
        self._open: ContextVar[HeldBatch[K, V] | None] = ContextVar("held_batch", default=None)

    @property
    def items(self) -> int:
        """Return how many items are held."""
        return self._items

    def begin(self, consumer: str, position: int) -> HeldBatch[K, V]:
        """Start a batch of ``consumer`` at ``position``; drop what it held at another one."""
        if self._positions.pop(consumer, None) != position:
            self._drop(consumer)
        return HeldBatch(consumer)

    @contextmanager
    def opened(self, batch: HeldBatch[K, V]) -> Iterator[None]:
        """Make ``batch`` the one ``get`` and ``put`` use in this context."""
        token = self._open.set(batch)
        try:
            yield
        finally:
            self._open.reset(token)

    def commit(self, batch: HeldBatch[K, V], position: int) -> None:
        """Keep what ``batch`` staged: its transaction committed ``position``."""
        for key, value in batch.staged.items():
            self._forget(key)
            if value is not None:
                self._entries[key] = (batch.consumer, value)
                self._items += self._size(value)
        while self._items > self._max_items and self._entries:
            self._forget(next(iter(self._entries)))
        self._positions[batch.consumer] = position

    def get(self, key: K) -> V | None:
        """Return ``key``'s value as the open batch staged it, else as its consumer holds it;
        None when neither has it, and outside a batch."""
        batch = self._open.get()
        if batch is None:
            return None
        if key in batch.staged:
            return batch.staged[key]
        entry = self._entries.get(key)
        if entry is None or entry[0] != batch.consumer:
            return None
        self._entries.move_to_end(key)
        return entry[1]

    def put(self, key: K, value: V | None) -> None:
        """Stage ``key``'s value after the open batch (None: forget it); kept at commit."""
        batch = self._open.get()
        if batch is not None and self._max_items > 0:
            batch.staged[key] = value

    def _forget(self, key: K) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._items -= self._size(entry[1])

    def _drop(self, consumer: str) -> None:
        for key in [key for key, (owner, _) in self._entries.items() if owner == consumer]:
            self._forget(key)
