"""Whether a replay's cost per event grows with the run's length in a new process too.

A probe, not a figure of the suite: ``python -m bench.replayprobe [--rounds N] [--json]``.
The ``replay`` figure replays runs of 500, 5,000 and 50,000 events again and again in one
process. A replay holds its whole run (about 1.6 KB an event as read), and what it frees the
allocator may keep for the next replay or give back to the system, which must then map it
again: a page fault for every 4 KiB touched, paid as system time. This probe records the
figure's agent into one SQLite file, then replays each run in a process of its own, in a
new (seeded) order of lengths each round. Each process replays a 10-event run first (imports
and caches), then the measured run twice:

- ``first``: on the new process's heap, as ``tacho replay`` does;
- ``again``: right after the first, whose events were freed (the figure's case).

For each, the wall time, the CPU time in user and in system mode (all threads) and the minor
page faults, per event.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tachograph
from tachograph.store import SQLiteStore

from .common import check_lengths, load_average, probe_lengths, probe_parser
from .replay import AGENT, record_lengths

__all__ = ["main"]

LENGTHS = (500, 5_000, 50_000)
WARM_CALLS = 4
"""Tool calls of the run each process replays before the measured one (10 events)."""
LABELS = ("first", "again")
MEASURES = ("us_per_event", "user_us_per_event", "system_us_per_event", "minor_faults_per_event")
ROOT = Path(__file__).resolve().parent.parent
CHILD_TIMEOUT = 600.0
"""Seconds a process of the probe may take before the probe gives up on it."""


def _replay_once(store: SQLiteStore, run_id: str, events: int) -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter_ns()
    report = tachograph.replay(store, run_id, AGENT)
    elapsed = time.perf_counter_ns() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    if not report.reproduced or report.events != events:
        raise RuntimeError(f"the probe's replay of {run_id} did not reproduce its {events} events")
    return {
        "us_per_event": elapsed / 1000 / events,
        "user_us_per_event": (after.ru_utime - before.ru_utime) * 1e6 / events,
        "system_us_per_event": (after.ru_stime - before.ru_stime) * 1e6 / events,
        "minor_faults_per_event": (after.ru_minflt - before.ru_minflt) / events,
    }


def child(path: str, warm_run: str, run_id: str, events: int) -> dict[str, Any]:
    """In a new process: the warm-up replay, then ``run_id`` twice (see above)."""
    store = SQLiteStore(path, create=False)
    try:
        tachograph.replay(store, warm_run, AGENT)
        return {label: _replay_once(store, run_id, events) for label in LABELS}
    finally:
        store.close()


def _spawn(path: Path, warm_run: str, run_id: str, events: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.replayprobe", "--child", str(path), warm_run, run_id]
    try:
        done = subprocess.run(
            [*cmd, str(events)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=CHILD_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"the probe's process replaying {run_id} took over {CHILD_TIMEOUT:.0f} s"
        ) from None
    if done.returncode != 0:
        raise RuntimeError(f"the probe's process failed ({done.returncode}): {done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def probe(
    workdir: Path, rounds: int, lengths: Sequence[int] = LENGTHS, *, seed: int = 20
) -> dict[str, Any]:
    """Record a run of each length (and the warm-up run), then replay each in a new process
    ``rounds`` times. Lengths are taken in increasing order; each must be even (a run is
    started, finished and two events a call), at least 4, and given once."""
    lengths = sorted(lengths)
    check_lengths(lengths)
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    path = workdir / "replay.db"
    with contextlib.closing(SQLiteStore(path)) as store:
        warm_run = tachograph.record_run(AGENT, WARM_CALLS, store=store, actor="bench").run_id
        runs = record_lengths(store, lengths)
    order = random.Random(seed)
    samples: dict[str, dict[str, dict[int, list[float]]]] = {
        label: {m: {n: [] for n in runs} for m in MEASURES} for label in LABELS
    }
    for _ in range(rounds):
        for n in order.sample(list(runs), len(runs)):
            found = _spawn(path, warm_run, runs[n], n)
            for label in LABELS:
                for m in MEASURES:
                    samples[label][m][n].append(float(found[label][m]))
    out: dict[str, Any] = {"lengths": list(runs), "seed": seed}
    for label in LABELS:
        row: dict[str, Any] = {}
        for m in MEASURES:
            medians = [statistics.median(samples[label][m][n]) for n in runs]
            row[m] = {str(n): round(v, 3) for n, v in zip(runs, medians, strict=True)}
            if m in ("us_per_event", "user_us_per_event"):
                row[f"{m}_growth_to_next"] = [
                    round(later / earlier, 3) if earlier else None
                    for earlier, later in itertools.pairwise(medians)
                ]
        out[label] = row
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the probe and print it (as JSON with ``--json``)."""
    parser = probe_parser(
        "python -m bench.replayprobe",
        __doc__,
        rounds=8,
        rounds_help="processes per length",
        lengths=LENGTHS,
    )
    parser.add_argument("--seed", type=int, default=20, help="seed of the order of lengths")
    parser.add_argument(
        "--child", nargs=4, metavar=("DB", "WARM", "RUN", "EVENTS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.child:
        db, warm, run_id, events = args.child
        found = child(db, warm, run_id, int(events))
        print(json.dumps(found))
        return found
    lengths = sorted(probe_lengths(parser, args))
    with tempfile.TemporaryDirectory(prefix="tachograph-replayprobe-", dir=args.dir) as tmp:
        before = load_average()
        found = probe(Path(tmp), args.rounds, lengths, seed=args.seed)
        result = {"rounds": args.rounds, "load_average": before, **found}
        result["load_average_after"] = load_average()
    if args.json:
        print(json.dumps(result, indent=1))
        return result
    print(
        f"a replay in a new process, {args.rounds} processes a length, lengths in an order "
        f"seeded {args.seed} (medians):"
    )
    for label in LABELS:
        row = result[label]
        print(f"  {label}:")
        for m in MEASURES:
            per = " / ".join(f"{v:.3f}" for v in row[m].values())
            grown = row.get(f"{m}_growth_to_next")
            shown = ", ".join("-" if g is None else f"{g:.3f}x" for g in grown or ())
            tail = f"; growth {shown}" if shown else ""
            print(f"    {m:24s} {per}{tail}")
    print(f"  (runs of {' / '.join(map(str, result['lengths']))} events)")
    print(f"load average {before} -> {result['load_average_after']}")
    return result


if __name__ == "__main__":
    main()
