"""The lookups a person or an auditor makes of a large SQLite store, at two sizes, for one or
two versions of the library: ``python -m bench.lookupprobe [--before DIR]``.

No figure of the suite times these: each must cost the same whatever the store holds.
Each sample is a new process (with ``DIR``, or this checkout's ``src``, first on
``PYTHONPATH``) that fills a SQLite file of its own for each of ``--runs`` (runs of
``--events`` events, ten actors and one more with a single run, three tenants, one run
finished in error, a fifth unfinished and the rest finished ``ok``, and
``--audit`` store audit records a run, two of them retention's deletions; the audit
records are inserted as rows, since what is timed reads them and does not check their
chain), then takes each lookup ``--reads`` times and keeps the fastest, with the SQLite
virtual-machine steps it took:

- ``unknown_near``: ``run_info`` of an unknown id with close matches (``tacho show`` of a
  typo), its ``RunNotFound`` included;
- ``unknown_far``: the same for an id with nothing near it;
- ``actor_rare``: ``runs(actor=...)`` of the actor with one run;
- ``actor_page``: ``runs(actor=..., limit=20)`` of a common actor;
- ``status_rare``: ``runs(status="error")``, a status one run has;
- ``unfinished_page``: ``runs(status="unfinished", limit=20)``, a fifth of the runs being
  unfinished (the others finished ``ok``);
- ``audit_of``: ``audit_of("retention.delete")``, what verification asks for a tenant whose
  sealed runs retention deleted.

Each round takes one sample of each version, in a new seeded order. Growth is the larger
store's time over the smaller one's.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import alternating, sample_process, side_by_side_parser, versions

__all__ = ["main"]

LOOKUPS = (
    "unknown_near",
    "unknown_far",
    "actor_rare",
    "actor_page",
    "status_rare",
    "unfinished_page",
    "audit_of",
)


def _fill(path: Path, runs: int, events: int, audit: int) -> None:
    from tachograph.store import SQLiteStore
    from tachograph.testing import build_run

    with SQLiteStore(path, synchronous="normal") as store:
        batch: list[Any] = []
        for i in range(runs):
            actor = "rare" if i == runs // 2 else f"agent-{i % 10}"
            status = "error" if i == runs // 3 else None if i % 5 == 1 else "ok"
            batch += build_run(
                f"run-{i:07d}", events, actor=actor, tenant=f"t{i % 3}", status=status
            )
            if len(batch) >= 20_000:
                store.append(batch, durable=False)
                batch = []
        if batch:
            store.append(batch, durable=False)
    total = runs * audit
    deletions = {7, total - 7}  # two at any size: the same answer to find in both stores
    rows = (
        (
            seq,
            f"t{seq % 3}",
            "2026-01-01T00:00:00.000000Z",
            "probe",
            "retention.delete" if seq in deletions else "read",
            b'{"run_id":"run-0000000"}',
            None,
            "sha256:" + "0" * 64,
        )
        for seq in range(total)
    )
    with sqlite3.connect(path) as db:
        db.executemany("INSERT INTO store_audit VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)


def _measure(store: Any, call: Callable[[], object], reads: int) -> dict[str, float]:
    """The fastest of ``reads`` calls in ms, and the SQLite steps of one."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    times: list[float] = []
    for i in range(reads):
        if i == 0:
            store._db.set_progress_handler(count, 1)
        t0 = time.perf_counter_ns()
        try:
            call()
        except KeyError:  # RunNotFound: what an unknown id's lookup ends in
            pass
        times.append((time.perf_counter_ns() - t0) / 1e6)
        if i == 0:
            store._db.set_progress_handler(None, 1)
    # the first call counted steps (slower): the fastest of the others when there are any
    timed = times[1:] or times
    return {"ms": min(timed), "steps": steps}


def _child(sizes: list[int], events: int, audit: int, reads: int) -> dict[str, Any]:
    import tachograph
    from tachograph.store import SQLiteStore

    out: dict[str, Any] = {"tachograph": str(Path(tachograph.__file__).parent)}
    with tempfile.TemporaryDirectory(prefix="tachograph-lookupprobe-") as tmp:
        for runs in sizes:
            path = Path(tmp) / f"lookups-{runs}.db"
            _fill(path, runs, events, audit)
            with SQLiteStore(path) as store:
                lookups: dict[str, Callable[[], object]] = {
                    "unknown_near": lambda: store.run_info("run-0000123x"),
                    "unknown_far": lambda: store.run_info("zzz-unknown"),
                    "actor_rare": lambda: store.runs(actor="rare"),
                    "actor_page": lambda: store.runs(actor="agent-3", limit=20),
                    "status_rare": lambda: store.runs(status="error"),
                    "unfinished_page": lambda: store.runs(status="unfinished", limit=20),
                    "audit_of": lambda: list(store.audit_of("retention.delete")),
                }
                out[str(runs)] = {k: _measure(store, fn, reads) for k, fn in lookups.items()}
    return out


def _sizes(text: str) -> list[int]:
    sizes = [int(part) for part in text.split(",")]
    if len(sizes) != 2 or not 200 <= sizes[0] < sizes[1]:
        raise ValueError(text)
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = side_by_side_parser("python -m bench.lookupprobe", __doc__, rounds=3)
    parser.add_argument(
        "--runs",
        default="5000,50000",
        help="the two stores' runs, SMALL,LARGE (default 5000,50000; at least 200)",
    )
    parser.add_argument("--events", type=int, default=3, help="events a run (default 3)")
    parser.add_argument(
        "--audit", type=int, default=10, help="store audit records a run (default 10)"
    )
    parser.add_argument("--reads", type=int, default=5, help="timed calls a lookup (default 5)")
    args = parser.parse_args(argv)
    try:
        sizes = _sizes(args.runs)
    except ValueError:
        parser.error(f"--runs {args.runs}: expected SMALL,LARGE with 200 <= SMALL < LARGE")
    if args.rounds < 1 or args.reads < 1 or args.events < 1 or args.audit < 0:
        parser.error("--rounds, --reads and --events must be at least 1, --audit at least 0")
    options = ["--runs", args.runs, "--events", str(args.events), "--audit", str(args.audit)]
    options += ["--reads", str(args.reads)]
    if args.child:
        print(json.dumps(_child(sizes, args.events, args.audit, args.reads)))
        return 0
    sides = versions(parser, args.before)
    samples = alternating(
        sides,
        args.rounds,
        args.seed,
        lambda src: sample_process("bench.lookupprobe", src, options),
        quiet=args.json,
    )
    small, large = (str(n) for n in sizes)
    result: dict[str, Any] = {}
    for side, rows in samples.items():
        result[side] = {"samples": len(rows), "tachograph": sorted({r["tachograph"] for r in rows})}
        for key in LOOKUPS:
            at = {
                size: {
                    "ms": statistics.median(r[size][key]["ms"] for r in rows),
                    "steps": rows[0][size][key]["steps"],
                }
                for size in (small, large)
            }
            at["growth"] = at[large]["ms"] / at[small]["ms"] if at[small]["ms"] else None
            result[side][key] = at
    result["settings"] = {
        "rounds": args.rounds,
        "runs": sizes,
        "events": args.events,
        "audit": args.audit,
        "reads": args.reads,
        "seed": args.seed,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"{'version':<8} {'lookup':<13} {small + ' runs':>12} {'steps':>9} "
        f"{large + ' runs':>12} {'steps':>9} {'growth':>7}"
    )
    for side in sides:
        for key in LOOKUPS:
            r = result[side][key]
            growth = f"{r['growth']:.2f}" if r["growth"] is not None else "-"
            print(
                f"{side:<8} {key:<13} {r[small]['ms']:9.3f} ms {r[small]['steps']:9d} "
                f"{r[large]['ms']:9.3f} ms {r[large]['steps']:9d} {growth:>7}"
            )
    print(
        f"medians of {args.rounds} samples, each the fastest of {args.reads} calls; runs of "
        f"{args.events} events, {args.audit} store audit records a run"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
