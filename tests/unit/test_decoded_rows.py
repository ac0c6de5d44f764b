"""Unit tests of recall's decoded rows: a reload decodes only the rows whose text changed, and
arranges them from the arrangement before."""

import json

from memoryd.services.recall.cache import DecodedRows

Values = list[dict[str, int]]
Rows = DecodedRows[dict[str, int], Values]


def as_list(values: Values, _last: Values | None) -> Values:
    """Arrange rows as the list of their values."""
    return values


def counted() -> tuple[Rows, list[str]]:
    """Return rows decoded as JSON, and the texts decoded, in order."""
    texts: list[str] = []

    def decode(text: str) -> dict[str, int]:
        texts.append(text)
        loaded: dict[str, int] = json.loads(text)
        return loaded

    return DecodedRows(decode, as_list, max_rows=4), texts


def test_a_reload_decodes_the_changed_and_new_rows_and_drops_the_deleted() -> None:
    rows, texts = counted()
    first = rows.of("anna", [("a", '{"n":1}'), ("b", '{"n":2}'), ("c", '{"n":3}')])

    again = rows.of("anna", [("a", '{"n":1}'), ("b", '{"n":20}'), ("d", '{"n":4}')])
    after_delete = rows.of("anna", [("d", '{"n":4}')])

    assert [{"n": 1}, {"n": 2}, {"n": 3}] == first
    assert [{"n": 1}, {"n": 20}, {"n": 4}] == again
    assert again[0] is first[0]  # the unchanged row's value, not a new decode
    assert [{"n": 4}] == after_delete
    assert ['{"n":1}', '{"n":2}', '{"n":3}', '{"n":20}', '{"n":4}'] == texts


def test_owners_are_kept_apart() -> None:
    """The same key under another owner is another row."""
    rows, texts = counted()
    rows.of("anna", [("a", '{"n":1}')])
    bobs = rows.of("bob", [("a", '{"n":1}')])

    assert [{"n": 1}] == bobs
    assert 2 == len(texts)


def test_past_the_bound_the_owner_asked_least_recently_goes() -> None:
    rows, texts = counted()
    rows.of("anna", [("a", '{"n":1}'), ("b", '{"n":2}')])
    rows.of("bob", [("a", '{"n":3}'), ("b", '{"n":4}')])
    rows.of("anna", [("a", '{"n":1}'), ("b", '{"n":2}')])  # anna asked last
    rows.of("carl", [("a", '{"n":5}')])  # 5 rows: bob goes

    rows.of("anna", [("a", '{"n":1}'), ("b", '{"n":2}')])
    rows.of("bob", [("a", '{"n":3}'), ("b", '{"n":4}')])

    assert 7 == len(texts)  # 2 + 2 + 1, then bob's two again; anna's never again


def test_a_forgotten_owner_is_decoded_again() -> None:
    rows, texts = counted()
    rows.of("anna", [("a", '{"n":1}')])
    rows.forget(["anna", "nobody"])
    rows.of("anna", [("a", '{"n":1}')])

    assert 2 == len(texts)


def test_a_reload_is_arranged_from_the_owners_last_arrangement() -> None:
    """The arrangement before is handed over; a forgotten owner's, or another's, is not."""
    handed: list[tuple[int, ...] | None] = []

    def numbers(values: list[int], last: tuple[int, ...] | None) -> tuple[int, ...]:
        handed.append(last)
        return tuple(values)

    rows: DecodedRows[int, tuple[int, ...]] = DecodedRows(int, numbers)
    rows.of("anna", [("a", "1")])
    rows.of("anna", [("a", "1"), ("b", "2")])
    rows.of("bob", [("a", "3")])
    rows.forget(["anna"])
    rows.of("anna", [("a", "1")])

    assert [None, (1,), None, None] == handed
