"""The start-up heap is frozen out of the collector's passes; serving collects less often."""

import gc

from memoryd.services.runtime.heap import (
    SERVING_THRESHOLDS,
    collect_less_often,
    freeze_startup_heap,
)


def test_the_objects_alive_at_start_up_are_frozen() -> None:
    """Everything alive when it is called (this test's objects too) is left out of collections."""
    alive = [object()]
    try:
        frozen = freeze_startup_heap()
        assert frozen == gc.get_freeze_count()
        assert frozen > 0
        assert not any(obj is alive for obj in gc.get_objects())  # frozen ones are not listed
    finally:
        gc.unfreeze()


def test_serving_raises_the_thresholds_and_gives_back_the_old_ones() -> None:
    """A young generation of thousands, not hundreds, before the collector runs."""
    before = gc.get_threshold()
    try:
        assert before == collect_less_often()
        assert SERVING_THRESHOLDS == gc.get_threshold()
        assert SERVING_THRESHOLDS[0] >= 10 * before[0]
    finally:
        gc.set_threshold(*before)
