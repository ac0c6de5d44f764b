"""Tests for the circuit breaker and the retry backoff."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import random

import pytest

from memoryd.shared.adapters.llm.resilience import CircuitBreaker, backoff_delay


class FakeClock:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        """Start at zero."""
        self.now = 0.0

    def __call__(self) -> float:
        """Return the current time."""
        return self.now


def breaker_at(clock: FakeClock, *, threshold: int = 3, cooldown: float = 10.0) -> CircuitBreaker:
    """Make a breaker reading the fake clock."""
    return CircuitBreaker(failure_threshold=threshold, cooldown=cooldown, clock=clock)


def test_closed_breaker_lets_calls_through() -> None:
    """A new breaker is closed and allows calls."""
    breaker = breaker_at(FakeClock())

    assert breaker.allow()
    assert "closed" == breaker.state


def test_opens_after_threshold_consecutive_failures() -> None:
    """The Nth consecutive failure opens the breaker and calls are refused."""
    breaker = breaker_at(FakeClock(), threshold=3)

    for _ in range(2):
        breaker.record_failure()
    assert breaker.allow()
    breaker.record_failure()

    assert "open" == breaker.state
    assert not breaker.allow()


def test_success_resets_the_failure_count() -> None:
    """Failures separated by a success do not add up to the threshold."""
    breaker = breaker_at(FakeClock(), threshold=2)

    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()

    assert "closed" == breaker.state


def test_half_opens_after_cooldown_and_lets_one_trial_through() -> None:
    """After the cool-down one trial call is allowed, and a second waits."""
    clock = FakeClock()
    breaker = breaker_at(clock, threshold=1, cooldown=10.0)
    breaker.record_failure()

    clock.now = 9.9
    assert not breaker.allow()
    clock.now = 10.0
    assert "half_open" == breaker.state
    assert breaker.allow()
    assert not breaker.allow()


def test_successful_trial_closes_the_breaker() -> None:
    """A trial that succeeds closes the breaker for every call."""
    clock = FakeClock()
    breaker = breaker_at(clock, threshold=1, cooldown=10.0)
    breaker.record_failure()
    clock.now = 10.0
    breaker.allow()

    breaker.record_success()

    assert "closed" == breaker.state
    assert breaker.allow()


def test_failed_trial_opens_the_breaker_for_another_cooldown() -> None:
    """A trial that fails re-opens the breaker at once, counted from the failure."""
    clock = FakeClock()
    breaker = breaker_at(clock, threshold=3, cooldown=10.0)
    for _ in range(3):
        breaker.record_failure()
    clock.now = 10.0
    breaker.allow()

    clock.now = 12.0
    breaker.record_failure()

    assert "open" == breaker.state
    clock.now = 21.9
    assert not breaker.allow()
    clock.now = 22.0
    assert breaker.allow()


def test_a_trial_that_never_reports_does_not_wedge_the_breaker() -> None:
    """If a trial call vanishes, another trial is allowed after a further cool-down."""
    clock = FakeClock()
    breaker = breaker_at(clock, threshold=1, cooldown=10.0)
    breaker.record_failure()
    clock.now = 10.0
    breaker.allow()

    clock.now = 20.0

    assert breaker.allow()


@pytest.mark.parametrize(("threshold", "cooldown"), [(0, 1.0), (1, -1.0)])
def test_rejects_nonsense_settings(threshold: int, cooldown: float) -> None:
    """A threshold below one or a negative cool-down is refused."""
    with pytest.raises(ValueError):
        CircuitBreaker(failure_threshold=threshold, cooldown=cooldown)


def test_backoff_doubles_within_jitter_and_is_capped() -> None:
    """Each pause lies in the upper half of a doubling window that stops at the cap."""
    rng = random.Random(7)

    delays = [backoff_delay(attempt, base=0.5, cap=3.0, rng=rng) for attempt in range(1, 6)]

    windows = [0.5, 1.0, 2.0, 3.0, 3.0]
    assert all(w / 2 <= d <= w for d, w in zip(delays, windows, strict=True))


def test_backoff_jitter_spreads_callers() -> None:
    """Callers retrying the same attempt do not all wait the same time."""
    rng = random.Random(1)

    delays = {backoff_delay(3, base=1.0, cap=60.0, rng=rng) for _ in range(20)}

    assert 20 == len(delays)
