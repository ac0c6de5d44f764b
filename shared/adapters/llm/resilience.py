"""Keep a failing LLM endpoint from stalling the pipeline: a circuit breaker and retry pauses."""

import random
import time
from collections.abc import Callable
from typing import Literal

__all__ = ["BreakerState", "CircuitBreaker", "backoff_delay"]

BreakerState = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    """Fail fast after repeated failures; let one trial call through after a cool-down.

    Closed: every call goes through. After `failure_threshold` consecutive failures it opens:
    calls are refused. Once `cooldown` seconds have passed it half-opens: one trial call goes
    through, and its success closes the breaker while its failure opens it again. A trial that
    never reports back (a cancelled call) does not wedge it: another trial is let through after
    a further cool-down. No I/O and no hidden clock: time comes from `clock`.
    """

    def __init__(
        self,
        *,
        failure_threshold: int = 5,
        cooldown: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Configure when to open and how long to stay open."""
        if failure_threshold < 1:
            raise ValueError("failure_threshold must be at least 1")
        if cooldown < 0:
            raise ValueError("cooldown must not be negative")
        self._threshold = failure_threshold
        self._cooldown = cooldown
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._trial_at: float | None = None

    @property
    def state(self) -> BreakerState:
        """Report the state: closed, open, or half-open (a trial is due or under way)."""
        if self._opened_at is None:
            return "closed"
        if self._trial_at is not None or self._cooled_down():
            return "half_open"
        return "open"

    def allow(self) -> bool:
        """Say whether a call may go out now; a half-open breaker lets one trial through."""
        if self._opened_at is None:
            return True
        if self._cooled_down():
            self._trial_at = self._clock()
            return True
        return False

    def record_success(self) -> None:
        """Close the breaker and forget past failures."""
        self._failures = 0
        self._opened_at = None
        self._trial_at = None

    def record_failure(self) -> None:
        """Count a failure; open on reaching the threshold, or re-open after a failed trial."""
        self._failures += 1
        if self._opened_at is not None or self._failures >= self._threshold:
            self._opened_at = self._clock()
            self._trial_at = None

    def _cooled_down(self) -> bool:
        """Say whether a cool-down has passed since opening or since the last trial."""
        since = self._trial_at if self._trial_at is not None else self._opened_at
        return since is not None and self._clock() - since >= self._cooldown


def backoff_delay(attempt: int, *, base: float, cap: float, rng: random.Random) -> float:
    """Return the pause after failed attempt `attempt` (from 1): doubling, capped, jittered.

    The jitter draws from the upper half of the window, so callers that failed together spread
    out but none retries at once.
    """
    ceiling = min(cap, base * 2 ** (attempt - 1))
    return rng.uniform(ceiling / 2, ceiling)
