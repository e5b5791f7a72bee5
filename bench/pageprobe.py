"""Whether a smaller SQLite page makes the store's durable writes cheaper against the floors
of target 3.

A probe, not a figure of the suite: ``python -m bench.pageprobe [--rounds R] [--calls N]
[--events N] [--json] [--dir D]``. A commit of the store writes one WAL frame for each page
it changed (the event's row, its two unique indexes, its payload, the run's summary: five,
against the floor's one), and a frame is a whole page. Smaller pages make those frames
smaller; they also split a 1 KB payload over more pages. SQLite takes a file's page size
when the file is made (``PRAGMA page_size`` before its first table), so this would be a
setting for new stores, not a migration. For each page size (the default 4,096 bytes,
2,048 and 1,024), a store made with it, on a warm WAL (grown past SQLite's automatic
checkpoint, as the ``intent_durable`` figure's warm phase), and one raw file at the default
page size, the floor of both measures:

- ``intent``: a recorded write tool from its call to its body starting, the writer idle,
  each call followed by one raw commit of one row (``synchronous=FULL``): the median call
  in raw commits, as ``intent_durable``'s warm, idle figure;
- ``appends``: ``SQLiteStore.append`` of prebuilt events of 1 KB payloads, 100 a
  transaction, against raw inserts of their JSON lines, 100 a transaction (the floor of
  ``durable_appends``, without the writer thread): the store's share of the raw rate.

Each round measures every page size once, in a new (seeded) order; every store is verified
at the end.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sqlite3
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tachograph.store import verify_all

from . import appendprobe
from .common import build_run, load_average, remove_sqlite
from .durable import _CountingStore, _intent_rounds, _raw_db, _warm

__all__ = ["PAGE_SIZES", "main", "probe", "store_with_pages"]

PAGE_SIZES = (4096, 2048, 1024)


def store_with_pages(path: Path, page_size: int) -> _CountingStore:
    """A new SQLite store at ``path`` whose file has pages of ``page_size`` bytes (the
    store's own schema and settings otherwise)."""

    class Paged(_CountingStore):
        def _connect(self, target: str, *, uri: bool = False) -> sqlite3.Connection:
            db = super()._connect(target, uri=uri)
            db.execute(f"PRAGMA page_size = {int(page_size)}")  # no effect on a file made
            return db

    remove_sqlite(path)
    store = Paged(path)
    (actual,) = store._db.execute("PRAGMA page_size").fetchone()
    if actual != page_size:
        store.close()
        raise RuntimeError(f"{path} has pages of {actual} bytes, not {page_size}")
    return store


def probe(workdir: Path, rounds: int, calls: int, events: int, seed: int = 0) -> dict[str, Any]:
    """``rounds`` rounds, each page size once a round in a seeded order."""
    rng = random.Random(seed)
    raw_lines = [e.to_json() for e in build_run("probe-page-raw", 100, payload_bytes=200)]
    intent_rounds = max(1, calls // 10)  # _intent_rounds makes 10 idle calls a round
    sides: dict[int, dict[str, Any]] = {}
    try:
        for size in PAGE_SIZES:
            store = store_with_pages(workdir / f"store-{size}.db", size)
            raw_path = workdir / f"raw-{size}.db"
            remove_sqlite(raw_path)
            raw = _raw_db(raw_path)
            _warm(store, raw)
            sides[size] = {"store": store, "raw": raw, "intent": [], "appends": []}
        for r in range(rounds):
            order = list(PAGE_SIZES)
            rng.shuffle(order)
            for size in order:
                side = sides[size]
                out = _intent_rounds(side["store"], side["raw"], raw_lines, intent_rounds, _none)
                side["intent"].append(
                    statistics.median(out["isolated"]) / statistics.median(out["raw"])
                )
                batch = list(build_run(f"probe-page-{size}-{r}", events, payload_bytes=1_000))
                stored = appendprobe._store_append(side["store"], batch)
                raw_time = appendprobe._raw_insert(side["raw"], batch)
                side["appends"].append(raw_time / stored)
        result: dict[str, Any] = {}
        for size, side in sides.items():
            store = side["store"]
            reports = list(verify_all(store))
            result[str(size)] = {
                "intent_in_raw_commits": statistics.median(side["intent"]),
                "appends_share_of_raw": statistics.median(side["appends"]),
                "intent_samples": side["intent"],
                "appends_samples": side["appends"],
                "verified": all(rep.ok for rep in reports) and bool(reports),
            }
        return result
    finally:
        for side in sides.values():
            side["raw"].close()
            side["store"].close()


def _none() -> float:
    """No fsync sample beside each call (``_intent_rounds`` takes one)."""
    return 0.0


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the probe and print it (as JSON with ``--json``)."""
    parser = argparse.ArgumentParser(prog="python -m bench.pageprobe", description=__doc__)
    parser.add_argument("--rounds", type=int, default=8, help="rounds (each page size once)")
    parser.add_argument("--calls", type=int, default=40, help="write-tool calls a round")
    parser.add_argument("--events", type=int, default=2_000, help="events appended a round")
    parser.add_argument("--seed", type=int, default=0, help="seed of the rounds' order")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--dir", default=None, help="where to put the files (default: the temporary directory)"
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.calls < 10 or args.events < 100:
        parser.error("--rounds must be at least 1, --calls 10 and --events 100")
    # the recordings of _intent_rounds end their runs; nothing else is worth a log line here
    logging.getLogger("tachograph").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="tachograph-pageprobe-", dir=args.dir) as tmp:
        before = load_average()
        sizes = probe(Path(tmp), args.rounds, args.calls, args.events, args.seed)
        result = {
            "rounds": args.rounds,
            "calls": args.calls,
            "events": args.events,
            "sqlite": sqlite3.sqlite_version,
            "load_average": before,
            "load_average_after": load_average(),
            "page_sizes": sizes,
        }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(
            f"warm WAL, {args.rounds} rounds of {args.calls} write-tool calls (writer idle) "
            f"and {args.events} events appended 100 a transaction (medians):"
        )
        for size, row in sizes.items():
            print(
                f"  pages of {size:>5} bytes: intent {row['intent_in_raw_commits']:.3f} raw "
                f"commits; appends {row['appends_share_of_raw']:.3f} of the raw rate; "
                f"verified {row['verified']}"
            )
        print(f"load average {before} -> {result['load_average_after']}")
    return result


if __name__ == "__main__":
    main()
