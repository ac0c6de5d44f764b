"""When the Edge index's background build is due: sooner while the index is small."""

import pytest

from memoryd.shared.adapters.index import Optimizing
from memoryd.shared.adapters.index.edge import build_after


@pytest.mark.parametrize(
    ("indexed", "due"), [(0, 7_000), (14_000, 7_000), (21_000, 10_500), (100_000, 20_000)]
)
def test_a_background_build_comes_sooner_while_the_index_is_small(indexed: int, due: int) -> None:
    """In the background a build is due after ``quiet_points`` new points or half the points
    already in an HNSW, whichever is more, at most ``every``; in this process after ``every``
    exactly."""
    background = Optimizing(every=20_000, in_background=True, quiet_points=7_000)
    here = Optimizing(every=20_000, quiet_points=7_000)
    assert due == build_after(background, indexed)
    assert 20_000 == build_after(here, indexed)
    assert build_after(Optimizing(in_background=True), indexed) is None
