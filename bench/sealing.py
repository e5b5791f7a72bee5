"""Sealing figures: what sealing costs a recording, and what a proof costs an auditor.

- ``seal_overhead``: recording runs into SQLite with the :class:`SealingObserver` at its
  default policy (a seal every 1000 events and at run end, each followed by a signed
  checkpoint), against the same recording with no observer, in the same run.
- ``seal_proof``: in a tree of one million seals, the size of an inclusion proof (hashes,
  against ceil(log2 n)) and the time to verify it, against that many SHA-256 calls.
"""

from __future__ import annotations

import hashlib
import math
import time
from pathlib import Path

from tachograph.capture.recorder import Recorder
from tachograph.record.checkpoint import generate_key
from tachograph.record.merkle import Tree, verify_consistency, verify_inclusion
from tachograph.sealing import DEFAULT_EVERY_EVENTS, SealingObserver
from tachograph.store import SQLiteStore

from .common import Figure, Settings, Target, interleaved, measure_of, scaled

__all__ = ["figures"]


def _overhead_figure(settings: Settings, workdir: Path) -> Figure:
    events = scaled(10_000, settings.scale, minimum=50)
    repeats = settings.repeats or 5
    store = SQLiteStore(workdir / "seal.db")
    key = generate_key("bench.example/tachograph")
    observer = SealingObserver(key=key)
    counter = [0]

    def sample(observers: list[SealingObserver]) -> float:
        counter[0] += 1
        recorder = Recorder(
            store, run_id=f"bench-{counter[0]}", actor="bench", observers=list(observers)
        )
        t0 = time.perf_counter_ns()
        recorder.append("run.started", {"input": "x", "env": {}})
        for i in range(events - 2):
            recorder.append("decision", {"name": "step", "chosen": i, "pad": "x" * 500})
        recorder.append("run.finished", {"status": "ok"})
        recorder.flush()
        observer.drain()
        return (time.perf_counter_ns() - t0) / events

    subj, base = interleaved(lambda: sample([observer]), lambda: sample([]), repeats=repeats)
    subject = measure_of("sealed", subj, "ns/event")
    baseline = measure_of("unsealed", base, "ns/event")
    ratio = subject.median / baseline.median
    seals = store.seal_count("default")
    return Figure(
        key="seal_overhead",
        title=f"recording with seals every {DEFAULT_EVERY_EVENTS} events and at run end",
        subject=subject,
        baseline=baseline,
        ratio=ratio,
        ratio_label="sealed / unsealed",
        targets=[Target("cost ratio", ratio, "<=", 1.05)],
        extra={"events_per_run": events, "seals": seals, "errors": len(observer.errors)},
        profile_fn=lambda: sample([observer]),  # the store stays open for it
    )


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
