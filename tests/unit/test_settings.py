"""Settings that contradict each other are refused when read, with the variables named."""

import pytest
from pydantic import ValidationError

from memoryd.shared.settings import Settings


def test_the_latest_optimisation_cannot_come_before_its_quiet_spell() -> None:
    with pytest.raises(ValidationError, match="MEMORYD_INDEX_OPTIMIZE_LATEST_SECONDS"):
        Settings(index_optimize_quiet_seconds=20.0, index_optimize_latest_seconds=10.0)


def test_a_latest_at_the_quiet_spell_is_accepted() -> None:
    settings = Settings(index_optimize_quiet_seconds=20.0, index_optimize_latest_seconds=20.0)
    assert settings.index_optimize_latest_seconds == 20.0


def test_openai_embeddings_without_an_endpoint_are_refused() -> None:
    with pytest.raises(ValidationError, match="MEMORYD_EMBEDDING_BASE_URL"):
        Settings(embedding_kind="openai")
