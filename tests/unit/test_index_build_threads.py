"""The index's optimising child builds on half the cores: the service searches meanwhile."""

from memoryd.shared.adapters.index.edge_build import indexing_threads


def test_the_child_leaves_half_the_cores_to_the_service() -> None:
    assert [1, 1, 1, 2, 4] == [indexing_threads(cores) for cores in (None, 1, 2, 4, 8)]
