"""Verification in worker processes (``tachograph.store.parallel``) against the serial verifier.

Every golden vector stored as rows, a long run tampered at chunk borders and inside chunks,
and ``tacho verify --workers``: the reports are the serial verifier's, field for field.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from tachograph.cli.app import cli
from tachograph.record.event import hash_envelope
from tachograph.store import SQLiteStore, verify_all, verify_stored
from tachograph.store.parallel import (
    GROUP_EVENTS,
    GROUP_MIN_EVENTS,
    _group_events,
    parallel_url,
    verify_all_parallel,
    verify_stored_parallel,
)
from tachograph.testing import build_run

_EVENT_COLUMNS = (
    "tenant", "run_id", "seq", "event_id", "ts", "type", "actor", "trace_id", "span_id",
    "idempotency_key", "model", "seed", "payload_digest", "prev_hash", "hash",
)  # fmt: skip


def _store_lines(path: Path, lines: list[dict[str, object]]) -> None:
    """Write parsed interchange lines into a store file as rows, as a forger with write access
    would: no checks, whatever the unique keys let in, and a run summary claiming them all."""
    SQLiteStore(path).close()
    db = sqlite3.connect(path, isolation_level=None)
    try:
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'"):
            db.execute(f"DROP TRIGGER {name}")
        for line in lines:
            values = [line.get(c) for c in _EVENT_COLUMNS]
            values = [v if isinstance(v, (str, int, type(None))) else repr(v) for v in values]
            cur = db.execute(
                f"INSERT OR IGNORE INTO events ({', '.join(_EVENT_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(_EVENT_COLUMNS))})",
                values,
            )
            if cur.rowcount:
                payload = line.get("payload")
                body = None if payload is None else orjson.dumps(payload)
                db.execute(
                    "INSERT INTO payloads (id, salt, body) VALUES (?, ?, ?)",
                    (cur.lastrowid, line.get("salt"), body),
                )
        first, last = lines[0], lines[-1]
        db.execute(
            "INSERT OR IGNORE INTO runs (tenant, run_id, actor, started_at, last_at, events, "
            "head_hash) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                str(first.get("tenant")),
                str(first.get("run_id")),
                str(first.get("actor")),
                str(first.get("ts")),
                str(last.get("ts")),
                len(lines),
                str(last.get("hash")),
            ),
        )
    finally:
        db.close()


def _vector_files(vectors_dir: Path) -> list[Path]:
    events = vectors_dir / "events"
    return sorted([*events.glob("*.jsonl"), *(events / "invalid").glob("*.jsonl")])


def test_every_vector_stored_as_rows_verifies_alike(vectors_dir: Path, tmp_path: Path) -> None:
    checked = 0
    for number, source in enumerate(_vector_files(vectors_dir)):
        lines = []
        for raw in source.read_bytes().splitlines():
            if not raw.strip():
                continue
            try:
                parsed = json.loads(raw)
            except ValueError:
                continue  # a line that is not JSON cannot be a row
            if isinstance(parsed, dict):
                lines.append(parsed)
        if not lines:
            continue
        path = tmp_path / f"v{number}.db"
        _store_lines(path, lines)
        store = SQLiteStore(path)
        try:
            serial = [r.to_dict() for r in verify_all(store)]
            parallel = [r.to_dict() for r in verify_all_parallel(store, workers=2, chunk=2)]
            assert parallel == serial, source.name
            for report in serial:
                one = verify_stored_parallel(
                    store, report["run_id"], tenant=report["tenant"], workers=2, chunk=2
                )
                assert one.to_dict() == report, source.name
        finally:
            store.close()
        checked += 1
    assert checked >= 15  # the valid runs and (nearly) every invalid file


N = 600
CHUNK = 40  # 600 events, two workers: 8 chunks of 75 events, borders at 75, 150, ... 525


@pytest.fixture
def long_run(tmp_path: Path) -> Path:
    path = tmp_path / "long.db"
    store = SQLiteStore(path)
    store.append(build_run("long", N, status="ok"))
    store.append(build_run("short", 5))
    store.close()
    return path


def _tamper(path: Path, sql: str, *args: object) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'"):
            db.execute(f"DROP TRIGGER {name}")
        db.execute(sql, args)
    finally:
        db.close()


def _event_id(path: Path, seq: int) -> int:
    with sqlite3.connect(path) as db:
        return int(
            db.execute("SELECT id FROM events WHERE run_id='long' AND seq=?", (seq,)).fetchone()[0]
        )


SET_HASH = "UPDATE events SET hash=? WHERE run_id='long' AND seq=?"
OF_LONG = "SELECT id FROM events WHERE run_id='long'"
FORGED = "sha256:" + "ab" * 32

TAMPERS = {
    "clean": None,
    "hash-at-border": (SET_HASH, FORGED, 75),
    "hash-before-border": (SET_HASH, FORGED, 74),
    "prev-at-border": (
        "UPDATE events SET prev_hash=? WHERE run_id='long' AND seq=?", "sha256:" + "cd" * 32, 150
    ),
    "malformed-before-border": (
        "UPDATE events SET ts='yesterday' WHERE run_id='long' AND seq=?", 224
    ),
    "seq-gap": ("UPDATE events SET seq=seq+1000 WHERE run_id='long' AND seq=?", 300),
    "seq-as-text": ("UPDATE events SET seq='301' WHERE run_id='long' AND seq=?", 301),
    "tail-cut": ("DELETE FROM events WHERE run_id='long' AND seq>=?", 590),
    "first-row-other-tenant": (
        "UPDATE events SET tenant='other' WHERE run_id='long' AND seq=?", 0
    ),
    "erased": (
        f"UPDATE payloads SET body=NULL, salt=NULL WHERE id IN ({OF_LONG} AND seq IN (?, 76))", 75
    ),
    "body-changed-everywhere": (
        f"UPDATE payloads SET body=X'7b7d' WHERE id IN ({OF_LONG} AND seq > ?)", 10
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_a_long_run_in_chunks_verifies_alike(long_run: Path, name: str) -> None:
    tamper = TAMPERS[name]
    if tamper is not None:
        _tamper(long_run, *tamper)
    store = SQLiteStore(long_run)
    try:
        serial = [r.to_dict() for r in verify_all(store)]
        counted: list[int] = []
        parallel = [
            r.to_dict()
            for r in verify_all_parallel(store, workers=2, chunk=CHUNK, progress=counted.append)
        ]
        assert parallel == serial
        if name == "clean":
            assert all(r["status"] == "verified" for r in serial)
            assert sum(counted) == N + 5  # progress adds up to every event, exactly once
        for report in serial:
            if report["run_id"] != "long" or report["tenant"] != "default":
                continue
            one = verify_stored_parallel(store, "long", tenant="default", workers=2, chunk=CHUNK)
            assert one.to_dict() == verify_stored(store, "long", tenant="default").to_dict()
    finally:
        store.close()


def test_the_merged_chain_is_checked_at_the_borders(long_run: Path) -> None:
    """A forged event rehashed at a chunk's first row: only the link to the previous chunk's
    last hash can catch it, and it must (check 4 at the next row, as serially)."""
    store = SQLiteStore(long_run)
    events = store.events("long", tenant="default")
    store.close()
    import dataclasses

    forged = dataclasses.replace(events[75], ts="2026-01-01T00:00:00.000000Z")
    _tamper(
        long_run,
        "UPDATE events SET ts=?, hash=? WHERE id=?",
        forged.ts,
        hash_envelope(forged.envelope_jcs()),
        _event_id(long_run, 75),
    )
    store = SQLiteStore(long_run)
    try:
        report = verify_stored_parallel(store, "long", tenant="default", workers=2, chunk=CHUNK)
        assert report.to_dict() == verify_stored(store, "long", tenant="default").to_dict()
        first = report.first_failure
        assert first is not None
        assert (first.seq, int(first.check)) == (76, 4)
    finally:
        store.close()


def test_stores_a_worker_cannot_open_are_verified_serially(tmp_path: Path) -> None:
    from tachograph.store import MemoryStore

    memory = MemoryStore()
    memory.append(build_run("m", 120))
    assert parallel_url(memory) is None
    assert [r.to_dict() for r in verify_all_parallel(memory, workers=2, chunk=10)] == [
        r.to_dict() for r in verify_all(memory)
    ]
    assert verify_stored(memory, "m", workers=2).ok


def test_tacho_verify_workers_prints_the_same_json(long_run: Path) -> None:
    _tamper(long_run, SET_HASH, FORGED, 75)
    runner = CliRunner()
    outputs = []
    for args in (["verify", "--json"], ["verify", "--all", "--workers", "2", "--json"],
                 ["verify", "long", "--workers", "2", "--json"]):  # fmt: skip
        result = runner.invoke(cli, ["--store", str(long_run), *args])
        assert result.exit_code == 1, result.output
        outputs.append(json.loads(result.stdout))
    assert outputs[0] == outputs[1]
    # one run is also looked at for unvouched calls (a store's runs are not)
    one = [{k: v for k, v in r.items() if k != "unvouched"} for r in outputs[2]["runs"]]
    assert outputs[2]["runs"][0]["unvouched"] == []
    assert one == [r for r in outputs[0]["runs"] if r["run_id"] == "long"]
    bad = runner.invoke(cli, ["--store", str(long_run), "verify", "--workers", "0"])
    assert bad.exit_code == 2


def test_many_small_runs_in_groups_report_as_the_serial_verifier(tmp_path: Path) -> None:
    """Small runs go to the workers in groups (several per worker, so none is left with the
    last one alone for long); the reports still come in the serial order, a tampered run in
    the middle of a group included."""
    path = tmp_path / "many.db"
    with SQLiteStore(path) as store:
        for i in range(24):
            store.append(build_run(f"run-{i:02d}", 120))
    db = sqlite3.connect(path, isolation_level=None)
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'"):
        db.execute(f"DROP TRIGGER {name}")
    db.execute(
        "UPDATE payloads SET body = CAST('{\"x\":1}' AS BLOB) WHERE id = "
        "(SELECT id FROM events WHERE run_id='run-13' AND seq=50)"
    )
    db.close()
    with SQLiteStore(path) as store:
        serial = [r.to_dict() for r in verify_all(store)]
        parallel = [r.to_dict() for r in verify_all_parallel(store, workers=2)]
    assert parallel == serial
    assert [r["run_id"] for r in serial if r["failures"]] == ["run-13"]


def test_small_runs_are_grouped_for_balance_within_bounds() -> None:
    # 250,000 events over two workers: sixteen groups, not thirteen of 20,000
    assert _group_events(250_000, 2) == 15_625
    assert _group_events(10_000_000, 2) == GROUP_EVENTS
    assert _group_events(3_000, 2) == GROUP_MIN_EVENTS
