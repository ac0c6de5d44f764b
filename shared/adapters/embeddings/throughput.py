"""Measure an embedder's throughput in texts per second.

Run `python -m memoryd.shared.adapters.embeddings.throughput --batch-size 64 128` to time
MiniLM on the first 1,000 LoCoMo dialogue turns (short chat sentences).
"""

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .local import SentenceTransformerEmbedder
from .port import Embedder

_WARM_UP_TEXT = "warm-up sentence, not part of the timed texts"


async def measure_throughput(
    embedder: Embedder, texts: Sequence[str], *, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Return texts per second for one `embed` call over `texts`, after an untimed warm-up."""
    if not texts:
        raise ValueError("measure_throughput needs at least one text")
    # The warm-up loads a lazy model, so its one-off load is not counted as throughput.
    await embedder.embed([_WARM_UP_TEXT])
    started = clock()
    await embedder.embed(texts)
    return len(texts) / (clock() - started)


def locomo_turns(path: Path, count: int) -> list[str]:
    """Return the text of the first `count` dialogue turns of a LoCoMo file."""
    turns: list[str] = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        conversation = sample["conversation"]
        sessions = [key for key in conversation if key.startswith("session_") and key[8:].isdigit()]
        for key in sorted(sessions, key=lambda key: int(key[8:])):
            turns.extend(turn["text"] for turn in conversation[key])
    if len(turns) < count:
        raise ValueError(f"{path} holds {len(turns)} turns, fewer than {count}")
    return turns[:count]


async def _report(texts: list[str], batch_sizes: list[int], repeats: int) -> None:
    for batch_size in batch_sizes:
        embedder = SentenceTransformerEmbedder(batch_size=batch_size)
        runs = [await measure_throughput(embedder, texts) for _ in range(repeats)]
        print(
            f"{embedder.model_name} batch {batch_size}: median {statistics.median(runs):.1f} "
            f"texts/s over {repeats} runs of {len(texts)} ({', '.join(f'{r:.1f}' for r in runs)})"
        )


def main(argv: Sequence[str] | None = None) -> None:
    """Print the bundled MiniLM's throughput for each batch size asked for."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--batch-size", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--locomo", type=Path, default=Path("../shared/bench/locomo_dev.json"))
    args = parser.parse_args(argv)
    texts = locomo_turns(args.locomo, args.count)
    asyncio.run(_report(texts, args.batch_size, args.repeats))


if __name__ == "__main__":
    main()
