"""Coalesce concurrent embed calls into one model call.

A model encodes one call at a time, and a batch of eight short queries costs little more than
one. So while the model works, calls that arrive wait together, and the next model call
takes all of them (up to ``max_texts``): no timer, no added delay when the model is idle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from ._vectors import empty_rows
from .port import Embedder, Vectors


@dataclass(frozen=True, slots=True)
class _Waiting:
    texts: list[str]
    reply: asyncio.Future[Vectors]


class BatchingEmbedder:
    """Embed through ``inner``, one model call for all the calls waiting on it."""

    def __init__(self, inner: Embedder, *, max_texts: int = 64) -> None:
        """Put at most ``max_texts`` texts into one call (a single larger call goes alone)."""
        self._inner = inner
        self._max_texts = max_texts
        self._waiting: list[_Waiting] = []
        self._drainer: asyncio.Task[None] | None = None

    @property
    def model_name(self) -> str:
        """Name the inner model."""
        return self._inner.model_name

    @property
    def dimension(self) -> int:
        """Return the inner model's vector width."""
        return self._inner.dimension

    def waiting_texts(self) -> int:
        """Return how many texts wait for the model (the call in progress not counted)."""
        return sum(len(waiting.texts) for waiting in list(self._waiting))

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """Return one row per text, from a model call shared with concurrent callers."""
        if not texts:
            return empty_rows(self.dimension)
        reply: asyncio.Future[Vectors] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Waiting(list(texts), reply))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain())
        return await reply

    async def _drain(self) -> None:
        while self._waiting:
            batch = self._take()
            live = [waiting for waiting in batch if not waiting.reply.done()]  # not cancelled
            if not live:
                continue
            try:
                rows = await self._inner.embed([text for w in live for text in w.texts])
            except Exception as error:  # every caller of this call gets the model's error
                for waiting in live:
                    if not waiting.reply.done():
                        waiting.reply.set_exception(error)
                continue
            start = 0
            for waiting in live:
                end = start + len(waiting.texts)
                if not waiting.reply.done():
                    waiting.reply.set_result(rows[start:end])
                start = end

    def _take(self) -> list[_Waiting]:
        """Take the waiting calls, oldest first, up to ``max_texts`` texts (at least one call)."""
        taken, count = 0, 0
        for waiting in self._waiting:
            if taken and count + len(waiting.texts) > self._max_texts:
                break
            taken += 1
            count += len(waiting.texts)
        batch, self._waiting = self._waiting[:taken], self._waiting[taken:]
        return batch
