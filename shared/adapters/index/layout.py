"""The index's layout: its two vectors' names, and the shape of a Qdrant Edge shard.

The serving process and the optimising child (``edge_build``) load a shard with the same
config. This module imports nothing of memoryd beyond its package, whose names load lazily, so
the child holds only Python and Qdrant Edge: 374 against 405 MB peak (VmHWM) optimising a
12,620-point shard here, with the whole index adapter imported before.
"""

import qdrant_edge as qe

DENSE_VECTOR = "dense"
SPARSE_VECTOR = "bm25"


def segment_kilobytes(points: int, dimension: int) -> int:
    """Return the segment size Edge's optimiser is given for ``points`` dense float32 vectors.

    Qdrant sizes segments in kilobytes of vector data: 20,000 points of 384 floats are 30,000.
    """
    return max(1, points * dimension * 4 // 1024)


def edge_config(
    dimension: int,
    segment_points: int | None = None,
    indexing_threads: int = 0,
    payloads_in_ram: bool | None = None,
    search_threads: int | None = None,
) -> qe.EdgeConfig:
    """Return the shard layout: a cosine dense vector and a BM25 sparse vector with IDF.

    With ``segment_points``, segments stop growing at about that many points.
    ``indexing_threads``: threads that build an HNSW (0: Edge's choice, every core).
    ``payloads_in_ram``: read every page of the payload files in when a segment opens (Edge's
    ``Cached``), rather than map them and read a page when a point on it is asked for (None:
    as the shard has them; Edge's default is the latter). Edge 0.9 reads both through the
    same mapping: recall's read of 40 payloads by id took 0.43-0.46 ms either way, the first
    read of a page included, at 10,000 turns, while the pre-read held each segment's whole
    32 MB payload file (49 MB more for that shard, and the optimising child's peak 426 -> 346
    MB with the dense vectors also mapped without a pre-read). Edge 0.4 read payloads on disk
    slower (1.4-2.9 against 0.29 ms, docs/performance.md, session 26).
    ``search_threads``: the threads that search a shard's segments in parallel (None: as the
    shard has it; Edge's default is one per CPU it counts, eight on these 2-core machines).

    The dense vectors are mapped from their files without reading them in first (Edge's
    ``Memory.Cold``; its default, ``Cached``, reads every page of a segment's vector files when
    it opens them, the unused part of a segment's 32 MB chunk too). A search reads the pages
    it needs, which then stay: 25,271 points (10,000 turns) took a loaded shard from 263 to
    198 MB and the optimising child's peak from 500 to 426 MB, and searches ran at the same
    speed once their pages were in (p50 1.03-1.16 ms, 40 hits with payloads; 1.24-1.37
    against 1.04-1.08 ms on the first pass after a load). Segments made before keep what they
    had.
    """
    optimizers = None
    if segment_points is not None:
        optimizers = qe.EdgeOptimizersConfig(
            max_segment_size=segment_kilobytes(segment_points, dimension)
        )
    return qe.EdgeConfig(
        on_disk_payload=None if payloads_in_ram is None else not payloads_in_ram,
        vectors={
            DENSE_VECTOR: qe.EdgeVectorParams(
                size=dimension, distance=qe.Distance.Cosine, memory=qe.Memory.Cold
            )
        },
        sparse_vectors={SPARSE_VECTOR: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        hnsw_config=qe.HnswIndexConfig(
            m=16,
            ef_construct=100,
            full_scan_threshold=10_000,
            max_indexing_threads=indexing_threads,
        ),
        optimizers=optimizers,
        max_search_threads=search_threads,
    )
