"""Tests for measure_throughput and the LoCoMo text loader it is run on."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import json
from pathlib import Path

import pytest

from memoryd.shared.adapters.embeddings.throughput import locomo_turns, measure_throughput
from tests.fakes import HashEmbedder


async def test_throughput_is_texts_over_the_timed_call() -> None:
    """Ten texts embedded in two clock seconds is five texts per second."""
    ticks = iter([100.0, 102.0])

    rate = await measure_throughput(HashEmbedder(), ["t"] * 10, clock=lambda: next(ticks))

    assert 5.0 == rate


async def test_warm_up_runs_before_the_timed_call_on_other_text() -> None:
    """An untimed warm-up (loading a lazy model) precedes the timed call on the given texts."""
    embedder = HashEmbedder()

    await measure_throughput(embedder, ["a", "b"])

    assert 2 == len(embedder.calls)
    assert ["a", "b"] == embedder.calls[1]
    assert not set(embedder.calls[0]) & {"a", "b"}


async def test_no_texts_is_refused() -> None:
    """Timing nothing is an error, not a division by zero."""
    with pytest.raises(ValueError, match="at least one text"):
        await measure_throughput(HashEmbedder(), [])


def test_locomo_turns_follow_session_order(tmp_path: Path) -> None:
    """Turns come session by session in numeric order (session_2 before session_10)."""
    conversation = {
        "speaker_a": "A",
        "session_10": [{"text": "third"}],
        "session_2_date_time": "1:56 pm on 8 May, 2023",
        "session_2": [{"text": "first"}, {"text": "second"}],
    }
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([{"conversation": conversation}]))

    assert ["first", "second", "third"] == locomo_turns(path, 3)
    with pytest.raises(ValueError, match="fewer than 4"):
        locomo_turns(path, 4)
