"""Fall back to the offline extractor when an LLM step fails, and say that it did.

Every LLM step of every worker degrades the same way: the step's answer comes from the
offline extractor, and the failure is returned so the worker records it as ``llm.step_failed``
(a derived event: replay folds the answer that was used and never asks again).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

from memoryd.shared.adapters.llm.port import LlmFailure

log = structlog.get_logger(__name__)

A = TypeVar("A")

FALLBACK = "offline-v1"


async def answer_or_fallback(
    primary: Callable[[], Awaitable[A]], fallback: Callable[[], Awaitable[A]]
) -> tuple[A, LlmFailure | None]:
    """Return ``primary()``'s answer, or on ``LlmFailure`` ``fallback()``'s and the failure."""
    try:
        return await primary(), None
    except LlmFailure as failure:
        log.warning("llm_step_failed", step=failure.step, reason=failure.reason)
        return await fallback(), failure
