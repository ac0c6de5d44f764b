"""The start-up heap is frozen out of the collector's passes."""

import gc

from memoryd.services.runtime.heap import freeze_startup_heap


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
