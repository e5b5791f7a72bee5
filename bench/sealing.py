"""Sealing figures: what sealing costs a recording, and what a proof costs an auditor.

- ``seal_overhead``: recording runs into SQLite sealed as every recording is by default (the
  writer appends a seal every 1000 events and at run end in the batch's transaction, then a
  signed checkpoint, the key named by ``TACHOGRAPH_SIGNING_KEY``), against the same recording
  with ``seal=False``, in alternating rounds; ``extra`` adds the unsigned default and the
  :class:`SealingObserver` (the opt-in path of before) as ratios to the same baseline.
- ``seal_proof``: in a tree of one million seals, the size of an inclusion proof (hashes,
  against ceil(log2 n)) and the time to verify it, against that many SHA-256 calls.
"""

from __future__ import annotations

import hashlib
import math
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from tachograph.capture.recorder import Observer, Recorder
from tachograph.record.checkpoint import generate_key
from tachograph.record.merkle import Tree, verify_consistency, verify_inclusion
from tachograph.sealing import DEFAULT_EVERY_EVENTS, SIGNING_KEY_ENV, SealingObserver, SealPolicy
from tachograph.store import SQLiteStore

from .common import Figure, Settings, Target, interleaved, measure_of, remove_sqlite, scaled

__all__ = ["figures"]


def _overhead_figure(settings: Settings, workdir: Path) -> Figure:
    events = scaled(10_000, settings.scale, minimum=50)
    repeats = settings.repeats or 7
    remove_sqlite(workdir / "seal.db")  # a --dir kept from an earlier run holds these run ids
    store = SQLiteStore(workdir / "seal.db")
    key = generate_key("bench.example/tachograph")
    key_file = workdir / "bench.key"
    key_file.write_text(key.encode() + "\n")
    key_file.chmod(0o600)
    observer = SealingObserver(key=key)
    counter = [0]
    cpu: dict[int, float] = {}

    def sample(seal: SealPolicy | bool, *, signed: bool, observers: list[Observer]) -> float:
        counter[0] += 1
        saved = os.environ.pop(SIGNING_KEY_ENV, None)
        if signed:
            os.environ[SIGNING_KEY_ENV] = str(key_file)
        try:
            recorder = Recorder(
                store,
                run_id=f"bench-{counter[0]}",
                actor="bench",
                observers=list(observers),
                seal=seal,
            )
        finally:
            os.environ.pop(SIGNING_KEY_ENV, None)
            if saved is not None:
                os.environ[SIGNING_KEY_ENV] = saved
        t0 = time.perf_counter_ns()
        c0 = time.process_time_ns()
        recorder.append("run.started", {"input": "x", "env": {}})
        for i in range(events - 2):
            recorder.append("decision", {"name": "step", "chosen": i, "pad": "x" * 500})
        recorder.append("run.finished", {"status": "ok"})
        recorder.flush()
        observer.drain()
        # CPU time of the process (both threads) beside the wall time: on a loaded machine the
        # wall time is mostly fsync and waiting, the CPU time what sealing adds in work.
        cpu[counter[0]] = (time.process_time_ns() - c0) / events
        return (time.perf_counter_ns() - t0) / events

    variants: dict[str, Callable[[], float]] = {
        "unsealed": lambda: sample(False, signed=False, observers=[]),
        "signed": lambda: sample(SealPolicy(), signed=True, observers=[]),
        "unsigned": lambda: sample(SealPolicy(), signed=False, observers=[]),
        "observer": lambda: sample(False, signed=False, observers=[observer]),
    }
    samples, cpu_samples = rounds(variants, repeats=repeats, cpu=cpu, counter=counter)
    subject = measure_of("sealed by the writer, signed", samples["signed"], "ns/event")
    baseline = measure_of("unsealed", samples["unsealed"], "ns/event")
    ratio = subject.median / baseline.median
    unsigned = measure_of("sealed by the writer, unsigned", samples["unsigned"], "ns/event")
    observed = measure_of("SealingObserver, signed", samples["observer"], "ns/event")
    seals = store.seal_count("default")
    return Figure(
        key="seal_overhead",
        title=f"recording with seals every {DEFAULT_EVERY_EVENTS} events and at run end",
        subject=subject,
        baseline=baseline,
        ratio=ratio,
        ratio_label="sealed / unsealed",
        targets=[Target("cost ratio", ratio, "<=", 1.05)],
        extra={
            "events_per_run": events,
            "seals": seals,
            "checkpoints": store.latest_checkpoint("default") is not None,
            "cpu_ratio": round(
                _median(cpu_samples["signed"]) / _median(cpu_samples["unsealed"]), 4
            ),
            "cpu_ns_per_event": {k: round(_median(v)) for k, v in cpu_samples.items()},
            "unsigned_ratio": round(unsigned.median / baseline.median, 4),
            "observer_ratio": round(observed.median / baseline.median, 4),
            "rounds": repeats,
            "errors": len(observer.errors),
        },
        profile_fn=variants["signed"],  # the store stays open for it
    )


def _median(values: list[float]) -> float:
    return statistics.median(values)


def rounds(
    variants: dict[str, Callable[[], float]],
    *,
    repeats: int,
    cpu: dict[int, float],
    counter: list[int],
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Samples of every variant in alternating rounds: each round runs every variant once, in
    an order rotated from round to round, so that a noisy neighbour slows all alike. Returns
    the wall-time samples and the CPU-time ones (``cpu``, by sample number)."""
    names = list(variants)
    for name in names:  # warm-up
        variants[name]()
    out: dict[str, list[float]] = {name: [] for name in names}
    cpu_out: dict[str, list[float]] = {name: [] for name in names}
    for i in range(repeats):
        order = names[i % len(names) :] + names[: i % len(names)]
        for name in order:
            out[name].append(variants[name]())
            cpu_out[name].append(cpu[counter[0]])
    return out, cpu_out


def _proof_figure(settings: Settings) -> Figure:
    n = scaled(1_000_000, settings.scale, minimum=1000)
    repeats = settings.repeats or 7
    tree = Tree(hashlib.sha256(i.to_bytes(8, "big")).digest() for i in range(n))
    root = tree.root()
    depth = math.ceil(math.log2(n))
    indices = [(i * 7919) % n for i in range(200)]
    proofs = [(i, tree.inclusion_proof(i)) for i in indices]
    sizes = [len(p) for _, p in proofs]
    consistency = tree.consistency_proof(n // 3)
    verify_consistency(n // 3, n, consistency, tree.root(n // 3), root)

    def verify_sample() -> float:
        t0 = time.perf_counter_ns()
        for i, path in proofs:
            verify_inclusion(i, n, tree.levels[0][i], path, root)
        return (time.perf_counter_ns() - t0) / len(proofs)

    block = b"\x01" + bytes(64)

    def hashes_sample() -> float:
        t0 = time.perf_counter_ns()
        for _ in proofs:
            for _ in range(depth):
                hashlib.sha256(block).digest()
        return (time.perf_counter_ns() - t0) / len(proofs)

    subj, base = interleaved(verify_sample, hashes_sample, repeats=repeats)
    subject = measure_of("verify inclusion", subj, "ns/proof")
    baseline = measure_of(f"{depth} x SHA-256", base, "ns/proof")
    ratio = subject.median / baseline.median
    return Figure(
        key="seal_proof",
        title=f"an inclusion proof in a tree of {n:,} seals",
        subject=subject,
        baseline=baseline,
        ratio=ratio,
        ratio_label="verify / log2(n) hashes",
        targets=[
            Target("max proof hashes", float(max(sizes)), "<=", float(depth)),
            Target("consistency proof hashes", float(len(consistency)), "<=", 2.0 * depth),
        ],
        extra={
            "leaves": n,
            "proof_hashes_max": max(sizes),
            "proof_bytes_max": 32 * max(sizes),
            "consistency_hashes": len(consistency),
            "log2_n": depth,
        },
        profile_fn=verify_sample,
    )


def figures(settings: Settings) -> list[Figure]:
    """The sealing figures."""
    workdir = Path(settings.workdir) / "sealing"
    workdir.mkdir(parents=True, exist_ok=True)
    out = []
    for build in (lambda: _overhead_figure(settings, workdir), lambda: _proof_figure(settings)):
        started = time.perf_counter()
        fig = build()
        fig.extra["seconds"] = round(time.perf_counter() - started, 2)
        out.append(fig)
    return out
