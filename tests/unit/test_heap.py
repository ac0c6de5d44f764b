"""The start-up heap is frozen out of the collector's passes; serving and replay collect less."""

import gc

from memoryd.services.runtime.heap import (
    SERVING_THRESHOLDS,
    collect_less_often,
    folding,
    freeze_startup_heap,
)


def test_the_objects_alive_at_start_up_are_frozen() -> None:
    """Everything alive when it is called (this test's objects too) is left out of collections."""
    alive = [object()]
    try:
        frozen = freeze_startup_heap()
        # A frozen object can still be freed (another thread's, a test's before): never more.
        assert 0 < gc.get_freeze_count() <= frozen
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


def test_a_fold_collects_less_often_and_gives_back_what_it_froze() -> None:
    """Inside, the thresholds are raised and what is alive can be frozen; after, neither."""
    gc.unfreeze()  # nothing frozen before, whatever ran earlier in this process
    before = gc.get_threshold()
    log = [object()]
    with folding() as freeze:
        assert SERVING_THRESHOLDS == gc.get_threshold()
        freeze()
        assert gc.get_freeze_count() > 0
        assert not any(obj is log for obj in gc.get_objects())
    assert before == gc.get_threshold()
    assert gc.get_freeze_count() == 0
    assert any(obj is log for obj in gc.get_objects())


def test_a_fold_leaves_a_frozen_start_up_heap_frozen() -> None:
    """In a process that froze its start-up heap, a fold does not unfreeze it on exit."""
    try:
        frozen = freeze_startup_heap()
        with folding() as freeze:
            freeze()
        assert gc.get_freeze_count() >= frozen
    finally:
        gc.unfreeze()


def test_a_fold_that_fails_still_restores_the_collector() -> None:
    """An error inside (a replay that fails) gives the thresholds and the frozen heap back."""
    gc.unfreeze()
    before = gc.get_threshold()
    try:
        with folding() as freeze:
            freeze()
            raise RuntimeError("the log could not be read")
    except RuntimeError:
        pass
    assert before == gc.get_threshold()
    assert gc.get_freeze_count() == 0
