"""The in-process index's decode cache: what a write touched is decoded again."""

from uuid import uuid4

from memoryd.shared.adapters.index._mapping import DecodedPoints
from memoryd.shared.adapters.index.stored import TEXT_KEY

PAYLOAD = {"tenant": "acme", "user_id": "ann", "kind": "turn", "occurred_at": 1.0}


def stored(text: str) -> dict[str, object]:
    """Return a payload as the engine hands it back."""
    return {**PAYLOAD, TEXT_KEY: text}


def test_a_point_is_decoded_once_until_a_write_touches_it() -> None:
    """The second search reuses the decoded payload; after a write the engine's copy wins."""
    points = DecodedPoints()
    point_id = uuid4()
    first = points.hits([(point_id, 0.9, stored("old text"))])
    again = points.hits([(point_id, 0.8, stored("ignored: held"))])
    points.written([point_id])
    points.written([point_id])
    fresh = points.hits([(point_id, 0.7, stored("new text"))])

    assert ["old text", "old text", "new text"] == [h[0].text for h in (first, again, fresh)]
    assert [0.9, 0.8, 0.7] == [h[0].score for h in (first, again, fresh)]
    assert point_id == fresh[0].id


def test_a_search_that_a_write_overlapped_keeps_nothing() -> None:
    """Decoded before a write began and ended: not kept, so it cannot outlive the write."""
    points = DecodedPoints()
    point_id = uuid4()

    def overlapped():  # type: ignore[no-untyped-def]
        yield point_id, 0.5, stored("read before the write")
        points.written([point_id])  # the write begins while the search is being decoded

    points.hits(overlapped())
    later = points.hits([(point_id, 0.5, stored("read after the write"))])

    assert "read after the write" == later[0].text


def test_past_its_bound_the_cache_empties_and_fills_again() -> None:
    """At most ``max_points`` are held."""
    points = DecodedPoints(max_points=2)
    for _ in range(5):
        points.hits([(uuid4(), 0.1, stored("text"))])

    assert len(points) <= 2


def test_a_search_reads_only_the_payloads_not_held_and_drops_a_point_deleted_since() -> None:
    """The engine is asked for the missing payloads only; one it no longer has is no hit."""
    points = DecodedPoints()
    held, deleted = uuid4(), uuid4()
    points.hits([(held, 0.9, stored("held text"))])

    assert [deleted] == points.missing([held, deleted])
    hits = points.hits([(held, 0.9, None), (deleted, 0.8, None)])
    assert [(held, "held text")] == [(hit.id, hit.text) for hit in hits]


def test_a_write_between_the_search_and_its_payloads_keeps_nothing() -> None:
    """The epoch read before the query guards what the later payload read decodes."""
    points = DecodedPoints()
    point_id = uuid4()
    before_query = points.epoch
    points.written([point_id])  # a write begins after the query ran, before payloads are read
    points.hits([(point_id, 0.5, stored("read during the write"))], before_query)

    assert [point_id] == points.missing([point_id])
