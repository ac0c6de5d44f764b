"""The process heap after start-up: kept out of the garbage collector's full passes.

A long-running ``memoryd up`` holds ~185,000 tracked objects once started (the model's
session, modules, schemas, pydantic validators, the read caches). CPython's full (third
generation) collection walks all of them: measured ~100 ms each, a handful per 600 recalls,
and each one stalls every request in flight (recall p99 113-174 ms against a p50 of 16 ms,
2,000 turns in one scope). What start-up built lives as long as the process, so it is frozen
(``gc.freeze``): full passes then walk only what came later (p99 49 ms in the same
measurement; see docs/architecture.md "Recall latency").

What came later is mostly the read caches (decoded index points, what recall derived from
them): ~88,000 tracked objects after 200 first-time questions on 10,000 turns, and a full
pass over them took 17-44 ms, twice in those 200 recalls. A recall allocates thousands of
short-lived objects, so with CPython's thresholds (700, 10, 10) the young generation was
collected ~250 times and the middle one ~22 times in the same run. Serving raises them
(``SERVING_THRESHOLDS``): the same run then made ~11 young passes and no full one (collector
time 85-100 -> 18-22 ms, p99 48 -> 41-46 ms). Full passes still come, rarer; cyclic garbage
waits a little longer to be freed (the young generation holds up to 10,000 objects).

A replay is the same shape at a larger scale: the decoded log (every event, alive until the
replay ends) is walked by each full pass and promoted through the generations by the young
ones, while the folds allocate thousands of short-lived objects an event. ``folding``
collects less often for its duration and lets the replay freeze the decoded log: 5,700
events replayed at 4,280-5,230 events/s with CPython's thresholds, 5,460-5,980 with both
(three runs each, alternating; see docs/architecture.md "Replay").
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

SERVING_THRESHOLDS = (10_000, 20, 20)


def freeze_startup_heap() -> int:
    """Collect once, then exempt every object alive now from later collections.

    Return how many objects were frozen. Call it once, after start-up, before serving.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def collect_less_often(thresholds: tuple[int, int, int] = SERVING_THRESHOLDS) -> tuple[int, ...]:
    """Set the collector's generation thresholds for serving; return the ones it had."""
    before = gc.get_threshold()
    gc.set_threshold(*thresholds)
    return before


@contextmanager
def folding(thresholds: tuple[int, int, int] = SERVING_THRESHOLDS) -> Iterator[Callable[[], None]]:
    """Collect less often inside; the function yielded freezes every object alive then.

    Call it once what lives to the end is built (a replay's decoded log). On exit the
    thresholds are restored, and the objects frozen inside go back to the collector unless
    some were frozen before (``memoryd up``'s start-up heap stays frozen either way).
    """
    before = collect_less_often(thresholds)
    frozen_before = gc.get_freeze_count()
    try:
        yield gc.freeze
    finally:
        gc.set_threshold(*before)
        if not frozen_before:
            gc.unfreeze()
