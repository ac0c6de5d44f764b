"""Tests for build_llm, the LLM package's factory."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

from memoryd.shared.adapters.llm import MemoryLlm, OfflineExtractor, OpenAIChatLlm, build_llm


def test_no_base_url_gives_the_offline_extractor() -> None:
    """Without a configured endpoint the pipeline runs on the offline extractor."""
    llm = build_llm()

    assert isinstance(llm, OfflineExtractor)


async def test_base_url_gives_the_openai_adapter_named_by_model() -> None:
    """A configured endpoint gives the OpenAI-compatible adapter, named after its model."""
    llm = build_llm(base_url="http://127.0.0.1:9/v1", model="qwen2.5")

    assert isinstance(llm, OpenAIChatLlm)
    assert isinstance(llm, MemoryLlm)
    assert "openai:qwen2.5" == llm.name
    await llm.aclose()
