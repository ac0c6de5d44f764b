"""The peers bench prepares memoryd's models before its clock starts, as an install would."""

import asyncio
from pathlib import Path

import pytest

from memoryd.services.bench.peer_memoryd import prepare_models
from memoryd.shared.adapters.embeddings.onnx_export import data_file

pytestmark = pytest.mark.model


def test_the_models_are_exported_into_the_cache_memoryd_up_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORYD_MODEL_CACHE_DIR", str(tmp_path))

    asyncio.run(prepare_models())

    exports = sorted(tmp_path.rglob("*.onnx"))
    assert exports, "no model was exported into the cache"
    assert all(data_file(export).is_file() for export in exports)
