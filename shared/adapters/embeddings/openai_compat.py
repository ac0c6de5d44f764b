"""Any OpenAI-compatible embeddings endpoint (OpenAI, vLLM, Ollama, TEI, LiteLLM, ...)."""

from collections.abc import Sequence

import numpy as np
from openai import AsyncOpenAI
from openai.types import CreateEmbeddingResponse

from ._vectors import chunked, empty_rows, unit_rows
from .port import (
    EmbeddingDimensionError,
    EmbeddingError,
    Vectors,
)


class OpenAIEmbedder:
    """Embed texts through the `openai` client, batch by batch, retrying server errors."""

    def __init__(
        self,
        *,
        model: str,
        dimension: int,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 3,
        batch_size: int = 128,
    ) -> None:
        """Call `model` at `base_url`; an endpoint without auth still needs some `api_key`."""
        self._model_name = model
        self._dimension = dimension
        self.batch_size = batch_size
        self._source = f"{model} at {base_url or 'the OpenAI API'}"
        self._client = AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
        )

    @property
    def model_name(self) -> str:
        """Name the model as the endpoint knows it."""
        return self._model_name

    @property
    def dimension(self) -> int:
        """Return the vector width this embedder was configured for."""
        return self._dimension

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed `texts` in batches of `batch_size`, one request each."""
        if not texts:
            return empty_rows(self._dimension)
        batches = [await self._embed_batch(batch) for batch in chunked(texts, self.batch_size)]
        return np.concatenate(batches)

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()

    async def _embed_batch(self, texts: Sequence[str]) -> Vectors:
        # OpenAI rejects an empty input string; a space embeds the same absence of content.
        response = await self._client.embeddings.create(
            model=self._model_name,
            input=[text or " " for text in texts],
            encoding_format="float",
        )
        rows = _rows_in_input_order(response)
        if len(rows) != len(texts):
            raise EmbeddingError(
                f"{self._source} returned {len(rows)} vectors for {len(texts)} texts"
            )
        _check_widths(rows, self._dimension, self._source)
        return unit_rows(rows, self._dimension, source=self._source)


def _rows_in_input_order(response: CreateEmbeddingResponse) -> list[list[float]]:
    """Return the embeddings sorted by their `index`, which servers may answer out of order."""
    return [item.embedding for item in sorted(response.data, key=lambda item: item.index)]


def _check_widths(rows: list[list[float]], dimension: int, source: str) -> None:
    """Raise if any row is not `dimension` wide, naming the widths the endpoint sent."""
    widths = sorted({len(row) for row in rows})
    if widths != [dimension]:
        raise EmbeddingDimensionError(
            f"{source} returned {widths}-dimensional vectors; configured for {dimension}: "
            "set the dimension to the model's, or choose the model the index was built with"
        )
