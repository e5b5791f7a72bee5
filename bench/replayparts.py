"""Where a replay's time goes, against the ``replay`` figure's floor, for one or two versions
of the library: ``python -m bench.replayparts [--before DIR]``.

The ``replay`` figure divides the rate of reading and decoding a run (``store.read``) by the
rate of replaying it. A replay reads the same rows, so what it does besides the read decides
the ratio. Each sample is a new process (with ``DIR``, or this checkout's ``src``, first on
``PYTHONPATH``) that records the figure's agent (``bench.replay.AGENT``, ``--calls`` calls of
a pure tool), replays it once to warm up, then times ``--pairs`` reads and replays in turn,
the replay's two phases timed apart: loading the run (``_history``: the read, its
verification, the pairing of intents with completions, the seal verdict) and running the
agent on it (``_drive``: every served call). The rest is the replay's setup and its end
(the engine, the processors, the report, freeing the run). Each round takes one sample of
each version, in a new seeded order.

A change that moves time out of the replay into the next read (a reference cycle that keeps
the run alive until a collection) shows as a read that got slower: the figure's ratio would
rise for nothing.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from .common import alternating, sample_process, side_by_side_parser, versions

__all__ = ["PARTS", "main", "summary"]

PARTS = ("read_ms", "replay_ms", "load_ms", "agent_ms", "rest_ms")


def _child(calls: int, pairs: int) -> dict[str, Any]:
    import tempfile

    import tachograph
    from tachograph.replay import api
    from tachograph.store import SQLiteStore

    from .replay import AGENT

    spent: dict[str, list[float]] = {"load_ms": [], "agent_ms": []}

    def timed(name: str, fn: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name].append((time.perf_counter_ns() - t0) / 1e6)

        return run

    for name in ("_history", "_drive"):
        if not callable(getattr(api, name, None)):
            raise SystemExit(f"tachograph.replay.api has no {name}: this probe cannot time it")
    api._history = timed("load_ms", api._history)  # type: ignore[attr-defined]
    api._drive = timed("agent_ms", api._drive)  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory(prefix="tachograph-replayparts-") as tmp:
        store = SQLiteStore(Path(tmp) / "replay.db")
        try:
            run_id = tachograph.record_run(AGENT, calls, store=store, actor="bench").run_id
            events = store.run_info(run_id).events
            reads: list[float] = []
            replays: list[float] = []
            for i in range(pairs + 1):  # the first replay warms up (imports, caches)
                t0 = time.perf_counter_ns()
                decoded = list(store.read(run_id))
                del decoded
                t1 = time.perf_counter_ns()
                report = tachograph.replay(store, run_id, AGENT)
                t2 = time.perf_counter_ns()
                if not report.reproduced:
                    raise RuntimeError(f"the probe's replay diverged: {report.render()}")
                if i:
                    reads.append((t1 - t0) / 1e6)
                    replays.append((t2 - t1) / 1e6)
        finally:
            store.close()
    load = spent["load_ms"][1:]
    agent = spent["agent_ms"][1:]
    rest = [r - h - d for r, h, d in zip(replays, load, agent, strict=True)]
    out: dict[str, Any] = {
        "events": events,
        "calls": calls,
        "tachograph": str(Path(tachograph.__file__).parent),
    }
    for name, values in zip(PARTS, (reads, replays, load, agent, rest), strict=True):
        out[name] = statistics.median(values)
    out["ratio"] = out["read_ms"] / out["replay_ms"]
    return out


def _sample(src: Path, calls: int, pairs: int) -> dict[str, Any]:
    return sample_process("bench.replayparts", src, ["--calls", str(calls), "--pairs", str(pairs)])


def summary(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each version's medians over its samples: the read, the replay and its parts (ms), the
    ratio, and the agent's part per served call (us); with two versions, in how many rounds
    (paired by round) the second's ratio was the higher."""
    out: dict[str, Any] = {}
    for side, rows in samples.items():
        row: dict[str, Any] = {"samples": len(rows)}
        for name in (*PARTS, "ratio"):
            row[name] = statistics.median(r[name] for r in rows)
        row["agent_us_per_call"] = statistics.median(
            r["agent_ms"] * 1000 / r["calls"] for r in rows
        )
        row["tachograph"] = sorted({str(r.get("tachograph")) for r in rows})
        out[side] = row
    if set(samples) == {"before", "after"}:
        pairs = zip(samples["before"], samples["after"], strict=True)
        out["after_higher_in"] = sum(1 for b, a in pairs if a["ratio"] > b["ratio"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = side_by_side_parser("python -m bench.replayparts", __doc__, rounds=6)
    parser.add_argument(
        "--calls", type=int, default=2499, help="tool calls of the run (default 2499: 5,000 events)"
    )
    parser.add_argument(
        "--pairs", type=int, default=9, help="reads and replays a sample (default 9)"
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.pairs < 1 or args.calls < 1:
        parser.error("--rounds, --pairs and --calls must be at least 1")
    if args.child:
        print(json.dumps(_child(args.calls, args.pairs)))
        return 0
    sides = versions(parser, args.before)

    def sample(src: Path) -> dict[str, Any]:
        return _sample(src, args.calls, args.pairs)

    samples = alternating(sides, args.rounds, args.seed, sample, quiet=args.json)
    result = summary(samples)
    result["settings"] = {
        "rounds": args.rounds,
        "calls": args.calls,
        "pairs": args.pairs,
        "seed": args.seed,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    head = " ".join(f"{name:>10}" for name in PARTS)
    print(f"{'version':<8} {head} {'ratio':>7} {'us/call':>8}  samples")
    for side in sides:
        r = result[side]
        cells = " ".join(f"{r[name]:10.2f}" for name in PARTS)
        print(f"{side:<8} {cells} {r['ratio']:7.3f} {r['agent_us_per_call']:8.2f}  {r['samples']}")
    if "after_higher_in" in result:
        print(f"after's ratio higher in {result['after_higher_in']} of {args.rounds} rounds")
    events = 2 * args.calls + 2
    print(
        f"medians; a run of {events} events, {args.pairs} reads and replays a sample; load is "
        "the replay's _history, agent its _drive"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
