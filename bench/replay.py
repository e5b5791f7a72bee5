"""Replay of a synthetic agent (N calls of a pure tool) against reading and decoding the same
events from the store, at three run lengths."""

from __future__ import annotations

import functools
import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import tachograph
from tachograph.store import SQLiteStore

from .common import Figure, Settings, Target, measure_of, remove_sqlite, scaled

__all__ = ["figures"]

_rusage: Callable[[], Any] | None
try:
    import resource

    _rusage = functools.partial(resource.getrusage, resource.RUSAGE_SELF)
except ImportError:  # pragma: no cover - not on POSIX
    _rusage = None

LENGTHS = (1_000, 10_000, 100_000)
"""Run lengths in events (each tool call is two events, plus run.started and run.finished)."""


@tachograph.tool(effect="pure", name="bench_lookup")
def _lookup(i: int) -> dict[str, Any]:
    return {"item": i, "price_cents": (i * 37) % 10_000, "currency": "EUR"}


def _synthetic(calls: int) -> int:
    total = 0
    for i in range(calls):
        total += _lookup(i)["price_cents"]
    return total


AGENT = tachograph.agent(name="bench_replay_agent", tools=[_lookup], code_version="bench")(
    _synthetic
)


def record_lengths(store: SQLiteStore, lengths: Sequence[int]) -> dict[int, str]:
    """One run of :data:`AGENT` of each length (see :func:`~bench.common.check_lengths`)
    recorded into ``store``: the run ids by their number of events, in the order given."""
    runs: dict[int, str] = {}
    for length in lengths:
        calls = max(1, (length - 2) // 2)
        result = tachograph.record_run(AGENT, calls, store=store, actor="bench")
        runs[store.run_info(result.run_id).events] = result.run_id
    return runs


def _replay_rate(store: SQLiteStore, run_id: str, events: int) -> float:
    """Events per second of one replay of ``run_id`` (which must reproduce)."""
    t0 = time.perf_counter_ns()
    report = tachograph.replay(store, run_id, AGENT)
    elapsed = time.perf_counter_ns() - t0
    if not report.reproduced:
        raise RuntimeError(f"benchmark replay diverged: {report.render()}")
    return events / (elapsed / 1e9)


CROWD = 2_000
"""Small runs added to the store (at scale 1) before the middle run is replayed again."""


def _crowded(
    store: SQLiteStore,
    run_id: str,
    events: int,
    settings: Settings,
) -> dict[str, Any]:
    """The middle run against the same run in a store that also holds many small sealed
    runs, replayed in turn: a replay holds its run against the tenant's whole seal log, and
    must not pay for the store's size each time. Reported beside the figure (not a target of
    issue 20)."""
    path = Path(store.path).with_name("crowded.db")
    remove_sqlite(path)
    crowded = SQLiteStore(path)
    try:
        twin = tachograph.record_run(AGENT, max(1, (events - 2) // 2), store=crowded, actor="bench")
        others = scaled(CROWD, settings.scale, minimum=200)
        for _ in range(others):
            tachograph.record_run(AGENT, 3, store=crowded, actor="bench")

        first = _replay_rate(crowded, twin.run_id, events)  # audits the crowded seal log
        alone: list[float] = []
        among: list[float] = []
        for _ in range(max(3, settings.repeats or 5)):
            alone.append(_replay_rate(store, run_id, events))
            among.append(_replay_rate(crowded, twin.run_id, events))
        seals = crowded.seal_count("default")
    finally:
        crowded.close()
        remove_sqlite(path)
    return {
        "other_runs": others,
        "seals": seals,
        "first_replay_events_per_s": round(first),
        "replay_alone_events_per_s": round(statistics.median(alone)),
        "replay_among_others_events_per_s": round(statistics.median(among)),
        "among_over_alone": round(statistics.median(among) / statistics.median(alone), 3),
    }


def figures(settings: Settings) -> list[Figure]:
    """The replay figure: rate against reading at the middle length, and linearity."""
    started = time.perf_counter()
    workdir = Path(settings.workdir) / "replay"
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "replay.db"
    remove_sqlite(path)
    store = SQLiteStore(path)
    lengths = [scaled(n, settings.scale, minimum=n // 50) for n in LENGTHS]
    runs: dict[int, tuple[str, int]] = {}
    events_at: dict[str, int] = {}
    for length in lengths:
        calls = max(1, (length - 2) // 2)
        result = tachograph.record_run(AGENT, calls, store=store, actor="bench")
        runs[length] = (result.run_id, store.run_info(result.run_id).events)
        events_at[result.run_id] = length

    # What each replay cost the process beside its wall time (all threads: the check of a
    # page overlaps the read of the next): CPU in user and in system mode, and minor page
    # faults, per event. A replay whose memory the allocator gave back to the system after
    # the last sample pays the kernel to map it again (system time), however linear its own
    # work is.
    usage: dict[int, list[tuple[float, float, float]]] = {length: [] for length in lengths}

    def replay_sample(run_id: str, events: int) -> float:
        if _rusage is None:
            return _replay_rate(store, run_id, events)
        before = _rusage()
        rate = _replay_rate(store, run_id, events)
        after = _rusage()
        usage[events_at[run_id]].append(
            (
                (after.ru_utime - before.ru_utime) * 1e6 / events,
                (after.ru_stime - before.ru_stime) * 1e6 / events,
                (after.ru_minflt - before.ru_minflt) / events,
            )
        )
        return rate

    def read_sample(run_id: str, events: int) -> float:
        # Freeing the decoded events is timed too, as it is in a replay (which frees the run
        # it loaded before it returns). Until both were timed alike, a replay's events were
        # kept in a reference cycle and freed by the collector during the next read sample:
        # the baseline paid for the replay's freeing, and the ratio read high.
        t0 = time.perf_counter_ns()
        decoded = list(store.read(run_id))
        count = len(decoded)
        del decoded
        elapsed = time.perf_counter_ns() - t0
        assert count == events
        return events / (elapsed / 1e9)

    # Round robin over the lengths, so that a noisy neighbour slows every length alike: the
    # linearity verdict compares lengths, not moments. Short runs get more samples per round.
    rounds = settings.repeats or 3
    replays: dict[int, list[float]] = {length: [] for length in lengths}
    reads: dict[int, list[float]] = {length: [] for length in lengths}
    for length in lengths:  # warm up: the first replay pays for imports and caches
        if length < 20_000:
            replay_sample(*runs[length])
    for samples in usage.values():
        samples.clear()
    for _ in range(rounds):
        for length in lengths:
            per_round = max(1, min(5, 20_000 // max(1, length)))
            for _ in range(per_round):
                reads[length].append(read_sample(*runs[length]))
                replays[length].append(replay_sample(*runs[length]))
    per_length: list[dict[str, Any]] = []
    measures = {}
    for length in lengths:
        run_id, events = runs[length]
        replay_m = measure_of(f"tachograph.replay, {events} events", replays[length], "events/s")
        read_m = measure_of(f"store.read + decode, {events} events", reads[length], "events/s")
        measures[length] = (replay_m, read_m, run_id)
        row: dict[str, Any] = {
            "events": events,
            "replay": replay_m.to_dict(),
            "read": read_m.to_dict(),
            "ratio": replay_m.median / read_m.median,
            "replay_us_per_event": 1e6 / replay_m.median,
        }
        if usage[length]:
            user, system, faults = zip(*usage[length], strict=True)
            row["replay_user_us_per_event"] = statistics.median(user)
            row["replay_system_us_per_event"] = statistics.median(system)
            row["replay_minor_faults_per_event"] = statistics.median(faults)
        per_length.append(row)
    middle = lengths[1]
    subject, baseline, middle_run = measures[middle]
    crowded = _crowded(store, middle_run, runs[middle][1], settings)
    # Linearity: the cost per event may not grow as the run gets ten times longer.
    costs = [row["replay_us_per_event"] for row in per_length]
    growth = max(later / earlier for earlier, later in itertools.pairwise(costs))
    read_costs = [1e6 / row["read"]["median"] for row in per_length]
    read_growth = max(later / earlier for earlier, later in itertools.pairwise(read_costs))
    users = [float(row.get("replay_user_us_per_event", 0.0)) for row in per_length]
    user_growth = (
        max(later / earlier for earlier, later in itertools.pairwise(users)) if all(users) else None
    )
    ratio = subject.median / baseline.median
    return [
        Figure(
            key="replay",
            title=f"replay a {subject.name.split(', ')[1]} run (pure tool calls)",
            subject=subject,
            baseline=baseline,
            ratio=ratio,
            ratio_label="replay rate / read rate",
            targets=[
                Target("share of the read rate", ratio, ">=", 0.5),
                Target("per-event cost growth per 10x length", growth, "<=", 1.1),
            ],
            extra={
                "lengths": per_length,
                "growth": growth,
                "read_growth": read_growth,
                "user_cpu_growth": user_growth,
                "replay_us_per_event_longest": costs[-1],
                "read_us_per_event_longest": read_costs[-1],
                "crowded_store": crowded,
                "seconds": round(time.perf_counter() - started, 2),
            },
            profile_fn=lambda: tachograph.replay(store, middle_run, AGENT),
        )
    ]
