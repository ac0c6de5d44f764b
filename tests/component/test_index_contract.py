"""The behaviour every search-index adapter must show, run against Edge (in this process and
in its index host, a child process) and qdrant-client.

The server adapter runs in qdrant-client's local mode (``":memory:"``), which brute-forces
searches and ignores payload indexes but applies filters and the IDF modifier.
"""

import random
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from uuid import UUID, uuid4

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryd.shared.adapters.index import (
    EdgeSearchIndex,
    Hit,
    IndexPayload,
    IndexPoint,
    Kind,
    ScopeFilter,
    SearchIndex,
    sparse,
)
from memoryd.shared.adapters.index.server import QdrantServerIndex

DIM = 8
BACKENDS = ["edge", "edge-hosted", "server"]
pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")


def _build(backend: str, folder: Path) -> SearchIndex:
    """Return an unopened index of the given backend."""
    if backend == "edge":
        return EdgeSearchIndex(folder / "edge", DIM)
    if backend == "edge-hosted":
        return EdgeSearchIndex(folder / "edge", DIM, hosted=True)
    return QdrantServerIndex(":memory:", DIM, collection="contract")


@pytest.fixture(params=BACKENDS)
async def index(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SearchIndex]:
    """Yield an open, empty index of each backend."""
    built = _build(request.param, tmp_path)
    await built.ensure_collection()
    yield built
    await built.close()


def _axis(i: int) -> list[float]:
    """Return the unit vector along axis i."""
    return [1.0 if j == i else 0.0 for j in range(DIM)]


def _random_unit(rng: np.random.Generator) -> list[float]:
    """Return a random unit vector."""
    vector = rng.standard_normal(DIM)
    values: list[float] = (vector / np.linalg.norm(vector)).tolist()
    return values


def _point(
    text: str = "note",
    *,
    dense: list[float] | None = None,
    point_id: UUID | None = None,
    tenant: str = "acme",
    user: str = "ann",
    agent: str = "bot",
    session: str = "s1",
    kind: Kind = "turn",
    at: float = 1000.0,
) -> IndexPoint:
    """Return a point with sensible defaults."""
    payload = IndexPayload(
        tenant=tenant, user_id=user, agent_id=agent, session_id=session, kind=kind, occurred_at=at
    )
    return IndexPoint(id=point_id or uuid4(), dense=dense or _axis(0), text=text, payload=payload)


def _ids(hits: Iterable[Hit]) -> set[UUID]:
    """Return the ids of the hits."""
    return {hit.id for hit in hits}


ACME = ScopeFilter(tenant="acme")


async def test_dense_search_finds_the_nearest_point_first(index: SearchIndex) -> None:
    """The point whose vector matches the query comes first, with cosine score 1."""
    points = [_point(dense=_axis(i)) for i in range(4)]
    await index.upsert(points)
    hits = await index.search_dense(_axis(2), ACME, limit=2)
    assert points[2].id == hits[0].id
    assert pytest.approx(1.0) == hits[0].score


async def test_hits_carry_payload_and_text(index: SearchIndex) -> None:
    """A hit returns the payload and text that were indexed."""
    point = _point("Ann prefers green tea")
    await index.upsert([point])
    hit = (await index.search_dense(point.dense, ACME))[0]
    expected = (point.payload, "Ann prefers green tea")
    assert expected == (hit.payload, hit.text)


async def test_bm25_finds_a_rare_name_the_vectors_miss(index: SearchIndex) -> None:
    """A keyword-only match (a rare name, far off in vector space) is found by BM25."""
    rng = np.random.default_rng(7)
    noise = [_point(f"we talked about the weather {i}", dense=_random_unit(rng)) for i in range(10)]
    target = _point("my cousin Zebulon visits in May", dense=[-x for x in _axis(0)])
    await index.upsert([*noise, target])
    hits = await index.search_sparse("who is zebulon", ACME, limit=3)
    assert [target.id] == [hit.id for hit in hits]


async def test_bm25_matches_other_forms_of_a_word(index: SearchIndex) -> None:
    """Stemming makes "running" find a text that says "runs"."""
    target = _point("she runs every morning before work")
    await index.upsert([target, _point("he cooks dinner")])
    hits = await index.search_sparse("running", ACME)
    assert [target.id] == [hit.id for hit in hits]


async def test_bm25_rare_term_outranks_a_repeated_common_term(index: SearchIndex) -> None:
    """IDF from the engine lets one rare term beat a common term said four times."""
    common = _point("coffee coffee coffee coffee")
    rare = _point("zanzibar")
    fillers = [_point(f"coffee break number {i}") for i in range(4)]
    await index.upsert([common, rare, *fillers])
    hits = await index.search_sparse("coffee zanzibar", ACME)
    assert rare.id == hits[0].id


async def test_hits_come_best_first_and_respect_the_limit(index: SearchIndex) -> None:
    """Scores never increase down the list, and no more than `limit` hits come back."""
    rng = np.random.default_rng(3)
    await index.upsert([_point("tea and biscuits", dense=_random_unit(rng)) for _ in range(12)])
    dense = await index.search_dense(_random_unit(rng), ACME, limit=5)
    sparse = await index.search_sparse("tea", ACME, limit=5)
    for hits in (dense, sparse):
        scores = [hit.score for hit in hits]
        assert sorted(scores, reverse=True) == scores
        assert 5 == len(hits)


@pytest.mark.parametrize("stream", ["dense", "sparse"])
async def test_equal_scores_come_by_id_however_the_points_were_written(
    index: SearchIndex, stream: str
) -> None:
    """Tied points come in id order and a cut keeps the smallest ids, whatever the write order.

    Two builds of one index write their points in different batches; a recall must not
    change with that, so the engine's storage order may not decide among equal scores.
    """
    rng = random.Random(7)
    tied = [_point("tea at noon", point_id=UUID(int=rng.getrandbits(128))) for _ in range(40)]
    best = _point("tea at noon with tea", dense=_axis(0))
    rng.shuffle(tied)
    await index.upsert(tied[:25])
    await index.upsert([best, *tied[25:]])
    tied_ids = sorted(point.id for point in tied)
    if stream == "dense":  # the same vector as the ties: one more tied point
        hits = await index.search_dense(_axis(0), ACME, limit=7)
        expected = sorted([*tied_ids, best.id])[:7]
    else:  # two "tea"s: the best BM25 score, then the ties
        hits = await index.search_sparse("tea", ACME, limit=7)
        expected = [best.id, *tied_ids][:7]
    assert expected == [hit.id for hit in hits]


async def test_stopword_only_query_finds_nothing(index: SearchIndex) -> None:
    """A query made only of stopwords has no terms, so BM25 returns nothing."""
    await index.upsert([_point("what was it")])
    assert [] == await index.search_sparse("what was it", ACME)


async def test_point_without_terms_is_still_found_by_dense_search(index: SearchIndex) -> None:
    """A text of stopwords gets no BM25 vector, but the point is stored and found by vector."""
    point = _point("it was what it was", dense=_axis(3))
    await index.upsert([point])
    assert [point.id] == [hit.id for hit in await index.search_dense(_axis(3), ACME)]
    assert 1 == await index.count(ACME)


async def test_upsert_with_same_id_replaces_the_point(index: SearchIndex) -> None:
    """Re-upserting an id replaces its text, vector and payload; old words stop matching."""
    point_id = uuid4()
    await index.upsert([_point("likes espresso", dense=_axis(0), point_id=point_id)])
    await index.upsert([_point("likes matcha", dense=_axis(1), point_id=point_id, at=5.0)])
    hit = (await index.search_dense(_axis(1), ACME))[0]
    assert 1 == await index.count(ACME)
    assert [] == await index.search_sparse("espresso", ACME)
    assert [point_id] == [hit.id for hit in await index.search_sparse("matcha", ACME)]
    expected = ("likes matcha", 5.0)
    assert expected == (hit.text, hit.payload.occurred_at)


async def test_a_point_found_then_replaced_is_found_as_replaced(index: SearchIndex) -> None:
    """A search after a re-upsert shows the new text and payload, not the ones found before."""
    point_id = uuid4()
    await index.upsert([_point("likes espresso", dense=_axis(0), point_id=point_id)])
    before = (await index.search_dense(_axis(0), ACME))[0]
    await index.upsert([_point("likes matcha", dense=_axis(0), point_id=point_id, at=5.0)])
    after = (await index.search_dense(_axis(0), ACME))[0]
    assert ("likes espresso", "likes matcha") == (before.text, after.text)
    assert 5.0 == after.payload.occurred_at


async def test_upsert_changed_writes_only_what_differs(index: SearchIndex) -> None:
    """Points stored as given are left alone; a new text, vector or payload is written."""
    same, retexted, moved, restamped = (
        _point(text, dense=_axis(i)) for i, text in enumerate(["tea", "coffee", "cocoa", "milk"])
    )
    await index.upsert([same, retexted, moved, restamped])
    again = [
        same,
        _point("black coffee", dense=_axis(1), point_id=retexted.id),
        _point("cocoa", dense=_axis(5), point_id=moved.id),
        _point("milk", dense=_axis(3), point_id=restamped.id, at=7.0),
        new := _point("juice", dense=_axis(4)),
    ]

    assert 4 == await index.upsert_changed(again)
    assert 0 == await index.upsert_changed(again)

    assert 5 == await index.count(ACME)
    assert {retexted.id} == _ids(await index.search_sparse("black", ACME))
    assert moved.id == (await index.search_dense(_axis(5), ACME))[0].id
    assert 7.0 == (await index.search_dense(_axis(3), ACME))[0].payload.occurred_at
    assert new.id == (await index.search_sparse("juice", ACME))[0].id


async def test_upsert_changed_rewrites_a_point_whose_words_changed_only_in_bm25(
    tmp_path: Path,
) -> None:
    """Another BM25 encoding (here its length norm) rewrites points whose text is unchanged."""
    point = _point("likes coffee and long walks")
    first = EdgeSearchIndex(tmp_path / "edge", DIM)
    await first.ensure_collection()
    await first.upsert([point])
    await first.close()
    reopened = EdgeSearchIndex(tmp_path / "edge", DIM, avg_len=10.0)
    await reopened.ensure_collection()
    try:
        assert 1 == await reopened.upsert_changed([point])
        assert 0 == await reopened.upsert_changed([point])
    finally:
        await reopened.close()


async def test_upsert_changed_rewrites_every_point_when_the_bm25_encoding_version_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new ENCODING_VERSION (the terms a text makes changed) rewrites unchanged points."""
    points = [_point("likes coffee"), _point("long walks")]
    first = EdgeSearchIndex(tmp_path / "edge", DIM)
    await first.ensure_collection()
    await first.upsert(points)
    await first.close()
    monkeypatch.setattr(sparse, "ENCODING_VERSION", sparse.ENCODING_VERSION + 1)
    reopened = EdgeSearchIndex(tmp_path / "edge", DIM)
    await reopened.ensure_collection()
    try:
        assert 2 == await reopened.upsert_changed(points)
        assert 0 == await reopened.upsert_changed(points)
    finally:
        await reopened.close()


async def test_delete_removes_from_dense_and_sparse_search(index: SearchIndex) -> None:
    """A deleted point is gone from both streams; the others stay."""
    gone, kept = _point("zebra stripes", dense=_axis(0)), _point("zebra mane", dense=_axis(1))
    await index.upsert([gone, kept])
    await index.delete([gone.id, uuid4()])
    assert {kept.id} == _ids(await index.search_dense(_axis(0), ACME))
    assert {kept.id} == _ids(await index.search_sparse("zebra", ACME))


async def test_delete_where_removes_only_the_scope(index: SearchIndex) -> None:
    """Deleting a user's scope removes their points from both streams, and nobody else's."""
    ann = _point("zebra", user="ann")
    bob = _point("zebra", user="bob")
    other_tenant_ann = _point("zebra", tenant="globex", user="ann")
    await index.upsert([ann, bob, other_tenant_ann])
    await index.delete_where(ScopeFilter(tenant="acme", user_id="ann"))
    assert {bob.id} == _ids(await index.search_dense(_axis(0), ACME))
    assert {bob.id} == _ids(await index.search_sparse("zebra", ACME))
    assert 1 == await index.count(ScopeFilter(tenant="globex"))


def _grid() -> list[IndexPoint]:
    """Return one point per combination of two values of every scope field."""
    rng = np.random.default_rng(11)
    return [
        _point("shared memo", dense=_random_unit(rng), tenant=t, user=u, agent=a, session=s,
               kind=k, at=at)
        for t in ("acme", "globex")
        for u in ("ann", "bob")
        for a in ("bot", "helper")
        for s in ("s1", "s2")
        for k in ("turn", "fact")
        for at in (100.0, 200.0)
    ]  # fmt: skip


def _in_scope(payload: IndexPayload, scope: ScopeFilter) -> bool:
    """Say whether a payload lies inside a scope (the test's own oracle)."""
    return (
        payload.tenant == scope.tenant
        and scope.user_id in (None, payload.user_id)
        and scope.agent_id in (None, payload.agent_id)
        and scope.session_id in (None, payload.session_id)
        and (scope.kinds is None or payload.kind in scope.kinds)
        and (scope.occurred_after is None or payload.occurred_at >= scope.occurred_after)
        and (scope.occurred_before is None or payload.occurred_at < scope.occurred_before)
    )


SCOPES = [
    ScopeFilter(tenant="globex"),
    ScopeFilter(tenant="acme", user_id="bob"),
    ScopeFilter(tenant="acme", user_id="ann", agent_id="helper"),
    ScopeFilter(tenant="acme", session_id="s2"),
    ScopeFilter(tenant="acme", kinds=("fact",)),
    ScopeFilter(tenant="acme", kinds=("turn", "fact"), occurred_after=150.0),
    ScopeFilter(tenant="globex", occurred_before=150.0),
    ScopeFilter(tenant="acme", occurred_after=100.0, occurred_before=200.0),
    ScopeFilter(tenant="nobody"),
]


@pytest.mark.parametrize("scope", SCOPES)
async def test_search_and_count_return_exactly_the_scope(
    index: SearchIndex, scope: ScopeFilter
) -> None:
    """Dense search, BM25 search and count see every point in the scope and none outside."""
    points = _grid()
    await index.upsert(points)
    expected = {point.id for point in points if _in_scope(point.payload, scope)}
    assert expected == _ids(await index.search_dense(_axis(0), scope, limit=100))
    assert expected == _ids(await index.search_sparse("memo", scope, limit=100))
    assert len(expected) == await index.count(scope)


async def test_dense_search_refuses_a_vector_of_the_wrong_dimension(index: SearchIndex) -> None:
    """A query vector of the wrong size is an error, not an empty result."""
    with pytest.raises(ValueError, match="shape"):
        await index.search_dense([1.0, 0.0], ACME)


_TENANTS = st.sampled_from(["t1", "t2", "t3"])
_USERS = st.sampled_from(["u1", "u2", "u3"])


@pytest.fixture(scope="module", params=BACKENDS)
async def shared_index(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[SearchIndex]:
    """Yield one index per backend that keeps every example's points, to widen the haystack."""
    built = _build(request.param, tmp_path_factory.mktemp("shared"))
    await built.ensure_collection()
    yield built
    await built.close()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    owners=st.lists(st.tuples(_TENANTS, _USERS), min_size=1, max_size=25),
    tenant=_TENANTS,
    user=st.none() | _USERS,
    seed=st.integers(0, 2**16),
)
async def test_no_hit_ever_crosses_tenant_or_user(
    shared_index: SearchIndex,
    owners: list[tuple[str, str]],
    tenant: str,
    user: str | None,
    seed: int,
) -> None:
    """For any mix of owners, searches return exactly the asked tenant's (and user's) points."""
    # Earlier examples' points stay in the index under other tenant names: they must never
    # show up either, and the prefix keeps this example's expected set exact.
    run = uuid4().hex[:8]
    rng = np.random.default_rng(seed)
    points = [
        _point("common words", dense=_random_unit(rng), tenant=f"{run}-{t}", user=u)
        for t, u in owners
    ]
    scope = ScopeFilter(tenant=f"{run}-{tenant}", user_id=user)
    expected = {point.id for point in points if _in_scope(point.payload, scope)}
    await shared_index.upsert(points)
    assert expected == _ids(await shared_index.search_dense(_random_unit(rng), scope, limit=50))
    assert expected == _ids(await shared_index.search_sparse("common", scope, limit=50))
    assert len(expected) == await shared_index.count(scope)
