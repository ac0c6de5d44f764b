"""Unit tests of recall's decoded rows: a reload decodes only the rows whose text changed."""

import json

from memoryd.services.recall.cache import DecodedRows


def counted() -> tuple[DecodedRows[dict[str, int]], list[str]]:
    """Return rows decoded as JSON, and the texts decoded, in order."""
    texts: list[str] = []

    def decode(text: str) -> dict[str, int]:
        texts.append(text)
        loaded: dict[str, int] = json.loads(text)
        return loaded

    return DecodedRows(decode, max_rows=4), texts


def test_a_reload_decodes_the_changed_and_new_rows_and_drops_the_deleted() -> None:
    rows, texts = counted()
    first = rows.values("anna", [("a", '{"n":1}'), ("b", '{"n":2}'), ("c", '{"n":3}')])

    again = rows.values("anna", [("a", '{"n":1}'), ("b", '{"n":20}'), ("d", '{"n":4}')])
    after_delete = rows.values("anna", [("d", '{"n":4}')])

    assert [{"n": 1}, {"n": 2}, {"n": 3}] == first
    assert [{"n": 1}, {"n": 20}, {"n": 4}] == again
    assert again[0] is first[0]  # the unchanged row's value, not a new decode
    assert [{"n": 4}] == after_delete
    assert ['{"n":1}', '{"n":2}', '{"n":3}', '{"n":20}', '{"n":4}'] == texts


def test_owners_are_kept_apart() -> None:
    """The same key under another owner is another row."""
    rows, texts = counted()
    rows.values("anna", [("a", '{"n":1}')])
    bobs = rows.values("bob", [("a", '{"n":1}')])

    assert [{"n": 1}] == bobs
    assert 2 == len(texts)


def test_past_the_bound_the_owner_asked_least_recently_goes() -> None:
    rows, texts = counted()
    rows.values("anna", [("a", '{"n":1}'), ("b", '{"n":2}')])
    rows.values("bob", [("a", '{"n":3}'), ("b", '{"n":4}')])
    rows.values("anna", [("a", '{"n":1}'), ("b", '{"n":2}')])  # anna asked last
    rows.values("carl", [("a", '{"n":5}')])  # 5 rows: bob goes

    rows.values("anna", [("a", '{"n":1}'), ("b", '{"n":2}')])
    rows.values("bob", [("a", '{"n":3}'), ("b", '{"n":4}')])

    assert 7 == len(texts)  # 2 + 2 + 1, then bob's two again; anna's never again


def test_a_forgotten_owner_is_decoded_again() -> None:
    rows, texts = counted()
    rows.values("anna", [("a", '{"n":1}')])
    rows.forget(["anna", "nobody"])
    rows.values("anna", [("a", '{"n":1}')])

    assert 2 == len(texts)
