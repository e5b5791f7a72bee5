"""Verification of a stored run against hashing the same bytes with hashlib."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from tachograph.store import SQLiteStore

from .common import Figure, Settings, Target, build_run, interleaved, measure_of, scaled

__all__ = ["bulk_load", "figures"]

PAYLOAD_BYTES = 1000


def bulk_load(store: SQLiteStore, run_id: str, n: int, *, payload_bytes: int, batch: int) -> float:
    """Append a synthetic run of ``n`` events in batches; returns the build+append seconds."""
    t0 = time.perf_counter()
    pending = []
    for event in build_run(run_id, n, payload_bytes=payload_bytes):
        pending.append(event)
        if len(pending) >= batch:
            store.append(pending)
            pending = []
    if pending:
        store.append(pending)
    return time.perf_counter() - t0


def figures(settings: Settings) -> list[Figure]:
    """The verification figure."""
    started = time.perf_counter()
    n = scaled(100_000, settings.scale, minimum=100)
    repeats = settings.repeats or 3
    workdir = Path(settings.workdir) / "verify"
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "verify.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    store = SQLiteStore(path)
    load_s = bulk_load(store, "bench-verify", n, payload_bytes=PAYLOAD_BYTES, batch=5000)

    # The same bytes verification hashes: each envelope's JCS, and salt + payload bytes.
    chunks: list[tuple[bytes, bytes, bytes]] = []
    for event in store.read("bench-verify", decode=False):
        assert event.salt is not None
        assert event.payload_bytes is not None
        chunks.append((event.envelope_jcs(), bytes.fromhex(event.salt), event.payload_bytes))
    total_bytes = sum(len(a) + len(b) + len(c) for a, b, c in chunks)

    def verify_sample() -> float:
        t0 = time.perf_counter_ns()
        report = store.verify("bench-verify")
        elapsed = time.perf_counter_ns() - t0
        if not report.ok or report.events != n:
            raise RuntimeError(f"benchmark run did not verify: {report.render()}")
        return n / (elapsed / 1e9)

    def hash_sample() -> float:
        sha = hashlib.sha256
        t0 = time.perf_counter_ns()
        for env, salt, body in chunks:
            sha(env).hexdigest()
            h = sha(salt)
            h.update(body)
            h.hexdigest()
        return n / ((time.perf_counter_ns() - t0) / 1e9)

    def read_sample() -> float:
        t0 = time.perf_counter_ns()
        for _ in store.read("bench-verify", decode=False):
            pass
        return n / ((time.perf_counter_ns() - t0) / 1e9)

    subj, base = interleaved(verify_sample, hash_sample, repeats=repeats)
    reads = [read_sample() for _ in range(repeats)]
    subject = measure_of(f"store.verify of a {n}-event run", subj, "events/s")
    baseline = measure_of(
        "hashlib.sha256 over the same envelope and payload bytes", base, "events/s"
    )
    read_m = measure_of("store.read(decode=False), no checks", reads, "events/s")
    ratio = subject.median / baseline.median
    return [
        Figure(
            key="verify",
            title=f"verify a stored run of {n} events",
            subject=subject,
            baseline=baseline,
            ratio=ratio,
            ratio_label="verify rate / raw hash rate",
            targets=[
                Target("events/s", subject.median, ">=", 150_000),
                Target("share of the raw hash rate", ratio, ">=", 0.5),
            ],
            extra={
                "events": n,
                "hashed_bytes_per_event": round(total_bytes / n, 1),
                "read_only": read_m.to_dict(),
                "read_share_of_verify_time": subject.median / read_m.median,
                "bulk_load_seconds": round(load_s, 2),
                "seconds": round(time.perf_counter() - started, 2),
            },
            profile_fn=lambda: store.verify("bench-verify"),
        )
    ]
