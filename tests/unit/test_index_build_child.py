"""The index's optimising child builds on half the cores and holds only what it builds with:
the service searches meanwhile, and the child's peak adds to the service's."""

import subprocess
import sys

from memoryd.shared.adapters.index.edge_build import BUILD_NICE, indexing_threads


def test_the_child_leaves_half_the_cores_to_the_service() -> None:
    assert [1, 1, 1, 2, 4] == [indexing_threads(cores) for cores in (None, 1, 2, 4, 8)]


def test_the_child_loads_qdrant_edge_the_layout_and_pages_not_the_index_adapter() -> None:
    # What `python -m memoryd.shared.adapters.index.edge_build` imports before main() runs.
    # The whole adapter (NumPy, pydantic, structlog, the contracts) cost the child ~42 MB of
    # its ~400 MB peak on a 12,620-point shard.
    probe = (
        "import sys, memoryd.shared.adapters.index.edge_build as child\n"
        "child.edge_config(384)\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('memoryd'))))\n"
        "print(' '.join(m for m in ('numpy', 'pydantic', 'structlog') if m in sys.modules))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.splitlines()

    index = "memoryd.shared.adapters.index"
    assert loaded[0].split() == [
        "memoryd",
        "memoryd.shared",
        "memoryd.shared.adapters",
        index,
        f"{index}.edge_build",
        f"{index}.layout",
        "memoryd.shared.adapters.pages",
    ]
    assert loaded[1:] == [""]


def test_the_index_packages_names_still_load_on_first_use() -> None:
    from memoryd.shared.adapters import index
    from memoryd.shared.adapters.index.edge import EdgeSearchIndex
    from memoryd.shared.adapters.index.port import ScopeFilter

    assert (index.EdgeSearchIndex, index.ScopeFilter) == (EdgeSearchIndex, ScopeFilter)


def niceness_after_lowering(started_at: int) -> int:
    """Return the niceness a process started at ``started_at`` has after ``lower_priority``."""
    probe = (
        "import os\n"
        "from memoryd.shared.adapters.index.edge_build import lower_priority\n"
        f"os.nice({started_at})\n"
        "lower_priority()\n"
        "print(os.getpriority(os.PRIO_PROCESS, 0))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_the_child_builds_at_the_niceness_of_background_work() -> None:
    # Recall's threads and the event loop go first: a child at niceness 0 took a core from them.
    assert BUILD_NICE == niceness_after_lowering(0) == 10


def test_a_child_of_a_service_run_nicer_stays_as_nice() -> None:
    assert 15 == niceness_after_lowering(15)
