"""Verification of a stored run against hashing the same bytes with hashlib."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from tachograph.record.event import Event, envelope_bytes, new_event
from tachograph.store import SQLiteStore

from .common import (
    Figure,
    Settings,
    Target,
    build_run,
    interleaved,
    measure_of,
    remove_sqlite,
    scaled,
)
from .record import float_payload

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


def float_run(run_id: str, n: int, *, tenant: str = "default") -> Iterator[Event]:
    """A run whose payloads hold integral floats and non-ASCII keys (``bench.record``)."""
    prev: str | None = None
    for seq in range(n):
        payload = float_payload(seq)
        event = new_event(
            run_id=run_id,
            seq=seq,
            type="run.started" if seq == 0 else "model.response",
            actor="bench",
            payload=payload,
            prev_hash=prev,
            tenant=tenant,
            checked=True,
        )
        prev = event.hash
        yield event


def load_events(store: SQLiteStore, events: Iterable[Event], *, batch: int = 5000) -> None:
    """Append ``events`` in batches."""
    pending: list[Event] = []
    for event in events:
        pending.append(event)
        if len(pending) >= batch:
            store.append(pending)
            pending = []
    if pending:
        store.append(pending)


def floor_rate(store: SQLiteStore, run_id: str, n: int) -> float:
    """The single-thread floor of verification: read the rows, rebuild each envelope's
    bytes, two SHA-256 (envelope; salt + stored payload bytes). No check, no canonical form."""
    sha = hashlib.sha256
    t0 = time.perf_counter_ns()
    for r in store.read_rows(run_id):
        env = envelope_bytes(1, r.tenant, r.run_id, r.seq, r.event_id, r.ts, r.type, r.actor,
                             r.trace_id, r.span_id, r.idempotency_key, r.model, r.seed,
                             r.payload_digest, r.prev_hash)  # fmt: skip
        sha(env).hexdigest()
        h = sha(bytes.fromhex(r.salt or ""))
        h.update(r.payload_bytes or b"")
        h.hexdigest()
    return n / ((time.perf_counter_ns() - t0) / 1e9)


def figures(settings: Settings) -> list[Figure]:
    """The verification figures."""
    workers = _workers_figure(settings)
    return [_verify_figure(settings), _floats_figure(settings), workers, _command_figure(settings)]


def _fresh(settings: Settings, name: str) -> SQLiteStore:
    workdir = Path(settings.workdir) / "verify"
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / name
    remove_sqlite(path)
    return SQLiteStore(path)


def _floats_figure(settings: Settings) -> Figure:
    """Verification of a run with integral floats and non-ASCII keys, against its floor."""
    started = time.perf_counter()
    n = scaled(100_000, settings.scale, minimum=100)
    repeats = settings.repeats or 3
    store = _fresh(settings, "floats.db")
    load_events(store, float_run("bench-floats", n))

    def verify_sample() -> float:
        t0 = time.perf_counter_ns()
        report = store.verify("bench-floats")
        elapsed = time.perf_counter_ns() - t0
        if not report.ok or report.events != n:
            raise RuntimeError(f"benchmark run did not verify: {report.render()}")
        return n / (elapsed / 1e9)

    subj, base = interleaved(
        verify_sample, lambda: floor_rate(store, "bench-floats", n), repeats=repeats
    )
    subject = measure_of(f"store.verify of a {n}-event run with floats", subj, "events/s")
    baseline = measure_of("read rows + envelope bytes + two sha256", base, "events/s")
    ratio = subject.median / baseline.median
    return Figure(
        key="verify_floats",
        title=f"verify {n} events with integral floats and non-ASCII keys",
        subject=subject,
        baseline=baseline,
        ratio=ratio,
        ratio_label="verify rate / single-thread floor",
        targets=[Target("share of the single-thread floor", ratio, ">=", 0.7)],
        extra={"events": n, "seconds": round(time.perf_counter() - started, 2)},
        profile_fn=lambda: store.verify("bench-floats"),
    )


def _workers_figure(settings: Settings) -> Figure:
    """Two worker processes against one, on one long run and on ``verify_all``."""
    from tachograph.store import verify_all, verify_stored
    from tachograph.store.parallel import CHUNK_MIN

    started = time.perf_counter()
    n = scaled(1_000_000, settings.scale, minimum=400)
    runs = scaled(200, settings.scale, minimum=4)
    per_run = scaled(2_500, min(1.0, settings.scale * 10), minimum=50)
    repeats = settings.repeats or 3
    chunk = min(CHUNK_MIN, max(50, n // 8))
    long_store = _fresh(settings, "long.db")
    bulk_load(long_store, "bench-long", n, payload_bytes=PAYLOAD_BYTES, batch=5000)
    many = _fresh(settings, "many.db")
    for i in range(runs):
        load_events(many, build_run(f"bench-many-{i:04d}", per_run, payload_bytes=PAYLOAD_BYTES))
    from tachograph.store.parallel import verify_stored_parallel

    def one_run(workers: int) -> float:
        t0 = time.perf_counter_ns()
        if workers == 1:
            report = verify_stored(long_store, "bench-long")
        else:
            report = verify_stored_parallel(long_store, "bench-long", workers=workers, chunk=chunk)
        elapsed = time.perf_counter_ns() - t0
        if not report.ok or report.events != n:
            raise RuntimeError(f"benchmark run did not verify: {report.render()}")
        return n / (elapsed / 1e9)

    def all_runs(workers: int) -> float:
        t0 = time.perf_counter_ns()
        reports = list(verify_all(many, workers=workers))
        elapsed = time.perf_counter_ns() - t0
        if len(reports) != runs or not all(r.ok for r in reports):
            raise RuntimeError("benchmark store did not verify")
        return runs * per_run / (elapsed / 1e9)

    long2, long1 = interleaved(lambda: one_run(2), lambda: one_run(1), repeats=repeats, warmup=0)
    all2, all1 = interleaved(lambda: all_runs(2), lambda: all_runs(1), repeats=repeats, warmup=0)
    subject = measure_of(f"verify one {n}-event run, 2 workers", long2, "events/s")
    baseline = measure_of(f"verify one {n}-event run, in this process", long1, "events/s")
    all_2 = measure_of(f"verify_all over {runs} runs, 2 workers", all2, "events/s")
    all_1 = measure_of(f"verify_all over {runs} runs, in this process", all1, "events/s")
    ratio = subject.median / baseline.median
    all_ratio = all_2.median / all_1.median
    return Figure(
        key="verify_workers",
        title=f"verify with 2 worker processes: one {n}-event run, and {runs} runs",
        subject=subject,
        baseline=baseline,
        ratio=ratio,
        ratio_label="speedup of 2 workers over 1 (one run)",
        targets=[
            Target("speedup on one long run", ratio, ">=", 1.6),
            Target("speedup on verify_all", all_ratio, ">=", 1.6),
        ],
        extra={
            "events": n,
            "chunk_min": chunk,
            "verify_all_2_workers": all_2.to_dict(),
            "verify_all_1_worker": all_1.to_dict(),
            "verify_all_speedup": all_ratio,
            "cpus": os.cpu_count(),
            "seconds": round(time.perf_counter() - started, 2),
        },
        # the parent's side only (waiting on the workers); workers are other processes
        profile_fn=lambda: verify_stored_parallel(long_store, "bench-long", workers=2, chunk=chunk),
    )


def _verify_figure(settings: Settings) -> Figure:
    """The verification figure."""
    started = time.perf_counter()
    n = scaled(100_000, settings.scale, minimum=100)
    repeats = settings.repeats or 3
    workdir = Path(settings.workdir) / "verify"
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "verify.db"
    remove_sqlite(path)
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
    return Figure(
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


def _tacho() -> list[str]:
    """The ``tacho`` console script beside this interpreter, else the same entry point."""
    script = Path(sys.executable).parent / "tacho"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from tachograph.cli import main; main()"]


def _command_figure(settings: Settings) -> Figure:
    """``tacho verify`` end to end, two workers against one, on the stores of
    ``verify_workers`` (built just before): each command a new process, as an auditor runs
    it, its start, its blob and unvouched-call checks and its output included.

    The commands read the library from bytecode, as an installed package does (``pip
    install`` compiles it): compiled once, before the samples, into a cache of this run's own
    (``PYTHONPYCACHEPREFIX``), so that an editable checkout on a machine that writes no
    bytecode is not timed compiling every module at each start, in the parent and in each
    worker."""
    started = time.perf_counter()
    workdir = Path(settings.workdir) / "verify"
    repeats = settings.repeats or 3
    with SQLiteStore(workdir / "long.db") as store:
        (long_info,) = store.runs()
    with SQLiteStore(workdir / "many.db") as store:
        many_events = store.count_events()
        many_runs = len(store.runs())
    cache = tempfile.mkdtemp(prefix="bench-pycache-", dir=workdir)
    env = {**os.environ, "PYTHONPYCACHEPREFIX": cache}
    env.pop("PYTHONDONTWRITEBYTECODE", None)

    def run(store: str, *args: str) -> float:
        cmd = [*_tacho(), "--store", str(workdir / store), "verify", *args, "--json"]
        t0 = time.perf_counter_ns()
        done = subprocess.run(cmd, capture_output=True, env=env, check=False)
        elapsed = (time.perf_counter_ns() - t0) / 1e9
        report = json.loads(done.stdout) if done.stdout else {}
        if done.returncode != 0 or not report.get("ok"):
            raise RuntimeError(f"tacho verify failed: {done.stderr.decode()[-500:]}")
        return elapsed

    def one(workers: int) -> float:
        return long_info.events / run("long.db", long_info.run_id, "--workers", str(workers))

    def every(workers: int) -> float:
        return many_events / run("many.db", "--all", "--workers", str(workers))

    run("many.db", "--all", "--workers", "2")  # compiles the library into the cache
    all2, all1 = interleaved(lambda: every(2), lambda: every(1), repeats=repeats, warmup=0)
    one2, one1 = interleaved(lambda: one(2), lambda: one(1), repeats=repeats, warmup=0)
    subject = measure_of(f"tacho verify --all ({many_runs} runs), 2 workers", all2, "events/s")
    baseline = measure_of(f"tacho verify --all ({many_runs} runs), 1 worker", all1, "events/s")
    one_2 = measure_of(f"tacho verify RUN ({long_info.events} events), 2 workers", one2, "events/s")
    one_1 = measure_of(f"tacho verify RUN ({long_info.events} events), 1 worker", one1, "events/s")
    ratio = subject.median / baseline.median
    one_ratio = one_2.median / one_1.median
    return Figure(
        key="verify_command",
        title=f"tacho verify with 2 worker processes: --all over {many_runs} runs, and one run",
        subject=subject,
        baseline=baseline,
        ratio=ratio,
        ratio_label="speedup of 2 workers over 1 (tacho verify --all)",
        targets=[
            Target("speedup of tacho verify --all", ratio, ">=", 1.6),
            Target("speedup of tacho verify RUN", one_ratio, ">=", 1.6),
        ],
        extra={
            "events": many_events,
            "run_events": long_info.events,
            "verify_run_2_workers": one_2.to_dict(),
            "verify_run_1_worker": one_1.to_dict(),
            "verify_run_speedup": one_ratio,
            "seconds_all_1_worker": round(many_events / baseline.median, 3),
            "seconds_run_1_worker": round(long_info.events / one_1.median, 3),
            "cpus": os.cpu_count(),
            "seconds": round(time.perf_counter() - started, 2),
        },
        # the command's own process, in this one: its serial parts (the workers are others)
        profile_fn=lambda: _in_process("many.db", workdir, "--all", "--workers", "2"),
    )


def _in_process(store: str, workdir: Path, *args: str) -> None:
    """``tacho verify`` in this process (for a profile), its output discarded."""
    import contextlib
    import io

    from tachograph.cli import main

    sink = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # emit_json writes bytes
    with contextlib.redirect_stdout(sink), contextlib.suppress(SystemExit):
        main(["--store", str(workdir / store), "verify", *args, "--json"])
