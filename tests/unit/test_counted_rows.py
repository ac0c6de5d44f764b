"""Held rows in groups that only grow: valid while the group's count stands, bounded by rows."""

from memoryd.services.recall.cache import CountedRows


def test_a_group_is_held_while_its_count_stands() -> None:
    rows: CountedRows[str] = CountedRows()
    rows.keep("alice", {"a": ["p1", "p2"], "b": ["p3"]})

    assert {"a": ["p1", "p2"], "b": ["p3"]} == rows.held("alice", {"a": 2, "b": 1})
    assert {"b": ["p3"]} == rows.held("alice", {"a": 3, "b": 1})  # a page was filed into a
    assert {} == rows.held("alice", {"c": 1})  # never read
    assert {} == rows.held("bob", {"a": 2})  # another owner's group of the same name


def test_past_the_bound_the_owner_asked_least_recently_goes() -> None:
    rows: CountedRows[str] = CountedRows(max_rows=4)
    rows.keep("alice", {"a": ["p1", "p2"]})
    rows.keep("bob", {"a": ["q1", "q2"]})
    rows.held("alice", {"a": 2})  # alice asked after bob
    rows.keep("carol", {"a": ["r1"]})

    assert 3 == len(rows)
    assert {} == rows.held("bob", {"a": 2})
    assert {"a": ["p1", "p2"]} == rows.held("alice", {"a": 2})


def test_a_group_read_again_replaces_the_one_held_and_forget_drops_an_owner() -> None:
    rows: CountedRows[str] = CountedRows()
    rows.keep("alice", {"a": ["p1"]})
    rows.keep("alice", {"a": ["p1", "p2"]})
    rows.keep("bob", {"a": ["q1"]})

    assert 3 == len(rows)
    assert 3 == rows.read
    rows.forget(["alice"])
    assert 1 == len(rows)
    assert {} == rows.held("alice", {"a": 2})
