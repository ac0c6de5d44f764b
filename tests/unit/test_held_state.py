"""Tests for ``HeldState``: values kept between batches only at the position committed."""

from __future__ import annotations

from memoryd.services.runtime.held import HeldState


def _commit(held: HeldState[str, list[int]], consumer: str, at: int, **values: list[int]) -> None:
    batch = held.begin(consumer, at)
    with held.opened(batch):
        for key, value in values.items():
            held.put(key, value)
    held.commit(batch, at + 1)


def _get(held: HeldState[str, list[int]], consumer: str, at: int, key: str) -> list[int] | None:
    batch = held.begin(consumer, at)
    with held.opened(batch):
        value = held.get(key)
    held.commit(batch, at)  # a batch that changed nothing
    return value


def test_a_value_is_read_back_at_the_position_committed_and_not_elsewhere() -> None:
    """Committed at 1: read at 1; a batch starting at 5 (another writer moved it) reads none."""
    held: HeldState[str, list[int]] = HeldState(max_items=10, size=len)
    _commit(held, "c", 0, ann=[1, 2])

    assert [1, 2] == _get(held, "c", 1, "ann")
    assert _get(held, "c", 5, "ann") is None
    assert 0 == held.items


def test_nothing_is_read_or_staged_outside_a_batch() -> None:
    """A fold called on its own (no batch open) reads SQL: nothing held reaches it."""
    held: HeldState[str, list[int]] = HeldState(max_items=10)
    _commit(held, "c", 0, ann=[1])
    held.put("bob", [2])

    assert held.get("ann") is None
    assert _get(held, "c", 1, "bob") is None


def test_each_consumer_reads_only_what_it_committed() -> None:
    """Partitions hold their own users: a partition's mismatch drops only its values."""
    held: HeldState[str, list[int]] = HeldState(max_items=10)
    _commit(held, "p0", 0, ann=[1])
    _commit(held, "p1", 0, bob=[2])

    assert _get(held, "p1", 1, "ann") is None
    assert _get(held, "p0", 9, "ann") is None  # p0 moved elsewhere: dropped
    assert [2] == _get(held, "p1", 1, "bob")


def test_the_least_recently_used_go_past_the_bound() -> None:
    """At most ``max_items`` items (by ``size``); a value read is used again."""
    held: HeldState[str, list[int]] = HeldState(max_items=4, size=len)
    _commit(held, "c", 0, ann=[1, 1], bob=[2])
    _get(held, "c", 1, "ann")
    _commit(held, "c", 1, cy=[3, 3])

    assert (None, [1, 1], [3, 3]) == (
        _get(held, "c", 2, "bob"),
        _get(held, "c", 2, "ann"),
        _get(held, "c", 2, "cy"),
    )
    assert 4 == held.items


def test_a_batch_reads_what_it_staged_and_a_forgotten_key_as_none() -> None:
    """Within a batch, a staged value (or a forgetting, None) wins over what is held."""
    held: HeldState[str, list[int]] = HeldState(max_items=10)
    _commit(held, "c", 0, ann=[1], bob=[2])
    batch = held.begin("c", 1)
    with held.opened(batch):
        held.put("ann", None)
        held.put("bob", [3])
        inside = (held.get("ann"), held.get("bob"))
    held.commit(batch, 2)

    assert (None, [3]) == inside
    assert (None, [3]) == (_get(held, "c", 2, "ann"), _get(held, "c", 2, "bob"))
