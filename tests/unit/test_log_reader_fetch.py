"""A reader's pull that finds no responder yet is asked again; one that never does, fails."""

from __future__ import annotations

import nats.js.errors
import pytest

from memoryd.shared.adapters import nats_log


class Unanswered:
    """A reader whose first ``misses`` pulls come back 503, then its messages."""

    def __init__(self, misses: int) -> None:
        self.misses = misses
        self.pulls = 0

    async def fetch(self, batch: int, timeout: float) -> list[str]:
        self.pulls += 1
        if self.pulls <= self.misses:
            raise nats.js.errors.ServiceUnavailableError
        return [f"m{n}" for n in range(batch)]


@pytest.fixture(autouse=True)
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nats_log, "FETCH_BACKOFF", 0.0001)


async def test_a_pull_before_the_reader_is_known_reads_on() -> None:
    reader = Unanswered(misses=3)
    assert await nats_log._fetch(reader, 2, timeout=1) == ["m0", "m1"]  # type: ignore[arg-type]
    assert reader.pulls == 4


async def test_a_reader_that_never_answers_fails_the_read() -> None:
    reader = Unanswered(misses=nats_log.FETCH_ATTEMPTS)
    with pytest.raises(nats.js.errors.ServiceUnavailableError):
        await nats_log._fetch(reader, 2, timeout=1)  # type: ignore[arg-type]
    assert reader.pulls == nats_log.FETCH_ATTEMPTS
