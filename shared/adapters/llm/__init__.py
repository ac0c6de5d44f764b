"""The LLM port, its deterministic offline extractor, and an OpenAI-compatible adapter."""

from typing import TYPE_CHECKING

from memoryd.shared.adapters.llm.offline import OfflineExtractor
from memoryd.shared.adapters.llm.port import (
    Continuity,
    Entity,
    EntityType,
    Fact,
    GraphExtraction,
    LlmFailure,
    MemoryLlm,
    PageText,
    PersonaExtraction,
    Relation,
    SegmentSummary,
)
from memoryd.shared.adapters.llm.resilience import CircuitBreaker, backoff_delay
from memoryd.shared.adapters.llm.traits import Trait, TraitGroup, load_traits

if TYPE_CHECKING:
    from memoryd.shared.adapters.llm.openai_compat import OpenAIChatLlm

__all__ = [
    "CircuitBreaker",
    "Continuity",
    "Entity",
    "EntityType",
    "Fact",
    "GraphExtraction",
    "LlmFailure",
    "MemoryLlm",
    "OfflineExtractor",
    "OpenAIChatLlm",
    "PageText",
    "PersonaExtraction",
    "Relation",
    "SegmentSummary",
    "Trait",
    "TraitGroup",
    "backoff_delay",
    "build_llm",
    "load_traits",
]


def build_llm(
    *,
    base_url: str | None = None,
    model: str = "gpt-4o-mini",
    api_key: str | None = None,
    timeout: float = 30.0,
    attempts: int = 3,
    base_delay: float = 0.5,
    failure_threshold: int = 5,
    cooldown: float = 30.0,
) -> MemoryLlm:
    """Build the configured LLM: the offline extractor unless a chat endpoint is given."""
    if not base_url:
        return OfflineExtractor()
    from memoryd.shared.adapters.llm.openai_compat import OpenAIChatLlm  # see __getattr__

    return OpenAIChatLlm(
        base_url=base_url,
        model=model,
        api_key=api_key or "no-key",
        timeout=timeout,
        attempts=attempts,
        base_delay=base_delay,
        breaker=CircuitBreaker(failure_threshold=failure_threshold, cooldown=cooldown),
    )


def __getattr__(name: str) -> object:
    # The openai package takes ~0.9 s to import here, and the embedded default (the offline
    # extractor) never uses it: imported on first use, so `memoryd up` starts that much sooner.
    if name == "OpenAIChatLlm":
        from memoryd.shared.adapters.llm.openai_compat import OpenAIChatLlm

        return OpenAIChatLlm
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
