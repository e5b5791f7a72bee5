"""The SQLite store: the conformance suite, then what only SQLite does (pragmas, triggers)."""

from __future__ import annotations

import dataclasses
import functools
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tachograph.errors import (
    DuplicateConflict,
    RunNotFound,
    SchemaVersionError,
    StoreError,
    StoreNotFound,
    StoreUnavailable,
    TachographError,
)
from tachograph.record.event import Event, new_event
from tachograph.store import DEFAULT_STORE, MemoryStore, SQLiteStore, Store, open_store
from tachograph.store import sqlite as sqlite_module
from tachograph.store.sqlite import SCHEMA_VERSION
from tachograph.store.verify import verify_stored
from tachograph.testing import build_run
from tachograph.testing.conformance import StoreConformance


class TestSQLiteStore(StoreConformance):
    def make_store(self, tmp_path: Path) -> Store:
        return SQLiteStore(tmp_path / "store.db")


class TestSQLiteStoreInMemory(StoreConformance):
    persistent = False
    stream_events = 20_000

    def make_store(self, tmp_path: Path) -> Store:
        return open_store("sqlite:///:memory:")


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def store(path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(path)
    try:
        yield store
    finally:
        store.close()


def _pragma(store: SQLiteStore, name: str) -> object:
    return store._db.execute(f"PRAGMA {name}").fetchone()[0]


# -- durability settings -------------------------------------------------------------------------


def test_wal_and_synchronous_full_by_default(store: SQLiteStore, path: Path) -> None:
    assert _pragma(store, "journal_mode") == "wal"
    assert _pragma(store, "synchronous") == 2  # FULL
    # SQLite itself waits 0.1 s; the store waits the rest in Python, where Ctrl-C stops it.
    assert _pragma(store, "busy_timeout") == 100
    assert store._busy_deadline >= 30
    assert store.synchronous == "full"
    raw = sqlite3.connect(path)
    try:  # WAL is a property of the file: every other connection sees it too
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        raw.close()


def test_synchronous_normal_is_an_explicit_opt_in_by_url(path: Path) -> None:
    store = open_store(f"sqlite:///{path}?synchronous=normal")
    try:
        assert isinstance(store, SQLiteStore)
        assert _pragma(store, "synchronous") == 1  # NORMAL
        assert _pragma(store, "journal_mode") == "wal"
    finally:
        store.close()
    store = open_store(f"sqlite:///{path}")
    try:
        assert isinstance(store, SQLiteStore)
        assert _pragma(store, "synchronous") == 2
    finally:
        store.close()


def test_an_unknown_synchronous_value_is_refused_listing_the_valid_ones(path: Path) -> None:
    with pytest.raises(StoreError, match="'full', 'normal' or 'extra'"):
        open_store(f"sqlite:///{path}?synchronous=off")
    assert not path.exists()


def test_a_writer_waits_for_a_held_lock_instead_of_failing(store: SQLiteStore, path: Path) -> None:
    events = build_run("run-a", 3)
    store.append(events[:1])
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another connection holds the write lock
    waiting = threading.Event()
    released = threading.Event()

    def release_later() -> None:
        waiting.wait()
        released.wait(0.3)
        other.execute("COMMIT")
        other.close()

    thread = threading.Thread(target=release_later)
    thread.start()
    waiting.set()
    try:
        receipts = store.append(events[1:])  # blocks until COMMIT above, then succeeds
    finally:
        released.set()
        thread.join()
    assert [r.seq for r in receipts] == [1, 2]


def test_a_lock_held_too_long_becomes_store_unavailable(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "_LOCK_DEADLINE", 0.2)
    store = SQLiteStore(path, busy_timeout=0.05)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailable) as info:
            store.append(build_run("run-a", 1))
        assert "locked" in str(info.value)
        assert not isinstance(info.value, sqlite3.Error)
        other.execute("ROLLBACK")
        assert store.append(build_run("run-a", 1))[0].seq == 0  # fine once released
    finally:
        other.close()
        store.close()


# -- append-only, in the database itself ----------------------------------------------------------


@pytest.fixture
def populated(store: SQLiteStore, path: Path) -> Iterator[sqlite3.Connection]:
    store.append(build_run("run-a", 4))
    raw = sqlite3.connect(path, isolation_level=None)
    try:
        yield raw
    finally:
        raw.close()


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE events SET actor='mallory' WHERE seq=1",
        "UPDATE events SET seq=seq WHERE seq=1",  # even a no-op update
        "UPDATE events SET hash=hash",
        "DELETE FROM events WHERE seq=3",
        "DELETE FROM events",
    ],
)
def test_events_cannot_be_updated_or_deleted(
    store: SQLiteStore, populated: sqlite3.Connection, sql: str
) -> None:
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        populated.execute(sql)
    assert store.verify("run-a").ok
    assert store.count_events() == 4


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE payloads SET body=X'7b7d' WHERE id=2",
        "UPDATE payloads SET salt='00000000000000000000000000000000' WHERE id=2",
        "UPDATE payloads SET body=NULL WHERE id=2",  # half an erasure
        "UPDATE payloads SET salt=NULL WHERE id=2",
        "UPDATE payloads SET id=99, body=NULL, salt=NULL WHERE id=2",
        "DELETE FROM payloads WHERE id=2",
    ],
)
def test_payloads_can_only_be_erased(
    store: SQLiteStore, populated: sqlite3.Connection, sql: str
) -> None:
    with pytest.raises(sqlite3.DatabaseError, match="tachograph: "):
        populated.execute(sql)
    assert store.verify("run-a").ok
    assert store.verify("run-a").erased == ()


def test_erasure_sets_body_and_salt_to_null_and_cannot_be_undone(
    store: SQLiteStore, populated: sqlite3.Connection
) -> None:
    populated.execute("UPDATE payloads SET body=NULL, salt=NULL WHERE id=2")
    report = store.verify("run-a")
    assert report.ok
    assert report.erased == (1,)
    with pytest.raises(sqlite3.DatabaseError, match="only be erased"):
        populated.execute("UPDATE payloads SET body=X'7b7d', salt='00' WHERE id=2")
    assert store.verify("run-a").erased == (1,)


def test_appends_are_not_blocked_by_the_triggers(store: SQLiteStore) -> None:
    events = build_run("run-a", 6, status="ok")
    store.append(events[:3])
    store.append(events[3:])  # updates the run summary, inserts events and payloads
    assert store.run_info("run-a").events == 6
    assert store.run_info("run-a").status == "ok"


def _chain(run_id: str, n: int, *, event_id_at: dict[int, str] | None = None) -> list[Event]:
    events: list[Event] = []
    for seq in range(n):
        events.append(
            new_event(
                run_id=run_id,
                seq=seq,
                type="run.started" if seq == 0 else "model.response",
                actor="agent",
                payload={"n": seq, "text": "é" * (seq % 7)},
                prev_hash=events[-1].hash if events else None,
                event_id=(event_id_at or {}).get(seq),
            )
        )
    return events


def _event_inserts(store: SQLiteStore) -> list[int]:
    """Start counting the INSERT statements into events the store's connection runs; the
    list holds the rows of each. (SQLite traces a statement again at each row's trigger, with
    the same text, its values filled in: another statement has other ids.)"""
    counts: list[int] = []
    last: list[str] = [""]

    def traced(sql: str) -> None:
        if sql.startswith("INSERT INTO events ") and sql != last[0]:
            counts.append(sql.count("),(") + 1)
        last[0] = sql

    store._db.set_trace_callback(traced)
    return counts


@pytest.mark.parametrize(
    ("limit", "lower_only"),
    [(None, False), (999, False), (999, True)],
    ids=["default", "999-known", "999-found-on-refusal"],
)
def test_a_batch_goes_in_many_rows_to_a_statement_and_reads_back_whole(
    store: SQLiteStore, limit: int | None, lower_only: bool
) -> None:
    """A batch is inserted in statements of up to 512 rows (32 where SQLite allows only 999
    parameters, as before 3.32), the rest in halving sizes; two runs interleaved in one batch
    come back whole, each payload beside its own event. A limit lower than the store assumed
    (a SQLite built so, on Python 3.10, which cannot ask) is found on the first refusal."""
    if limit is not None:
        if not hasattr(store._db, "setlimit"):
            pytest.skip("Connection.setlimit is Python 3.11+")
        store._db.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limit)
        if not lower_only:
            store._rows_per_insert = sqlite_module._rows_per_insert(store._db)
    widest = 512 if sqlite3.sqlite_version_info >= (3, 32, 0) else 32
    assert store._rows_per_insert == (widest if limit is None or lower_only else 32)
    a, b = _chain("run-a", 300), _chain("run-b", 301)
    batch = [e for pair in zip(a, b, strict=False) for e in pair] + b[300:]
    inserts = _event_inserts(store)
    receipts = store.append(batch)
    store._db.set_trace_callback(None)
    step = 32 if limit else widest
    halving = [step] * (601 // step)
    left = 601 % step
    while left:
        size = 1 << (left.bit_length() - 1)
        halving.append(size)
        left -= size
    assert inserts == halving  # 601 = 512 + 64 + 16 + 8 + 1, or 18x32 + 16 + 8 + 1
    assert store._rows_per_insert == step
    assert [(r.run_id, r.seq) for r in receipts] == [(e.run_id, e.seq) for e in batch]
    assert list(store.read("run-a")) == a
    assert list(store.read("run-b")) == b
    joined = store._db.execute(
        "SELECT count(*) FROM events e JOIN payloads p ON p.id = e.id"
    ).fetchone()[0]
    assert joined == 601
    assert verify_stored(store, "run-a").ok
    assert verify_stored(store, "run-b").ok


def _statements(store: SQLiteStore) -> list[str]:
    """Start listing the statements the store's connection runs, each once (SQLite traces
    an INSERT again at each row's trigger, with the same text), cut to their first words."""
    seen: list[str] = []
    last: list[str] = [""]

    def traced(sql: str) -> None:
        if sql != last[0]:
            seen.append(" ".join(sql.split()[:3]))
        last[0] = sql

    store._db.set_trace_callback(traced)
    return seen


@pytest.mark.skipif(sqlite3.sqlite_version_info < (3, 32, 0), reason="999 parameters at most")
def test_a_writer_batch_takes_six_statements(store: SQLiteStore) -> None:
    """A batch of the writer's size (512 events) into a run already stored is six statements:
    the lock, the run's summary with the largest event id, the events, their payloads, the
    summary's update and the commit. Python's sqlite3 lets go of the GIL for each and must
    win it back, up to the switch interval (5 ms) when another thread is busy in Python: the
    fewer, the faster the writer beside a busy agent. A new run's first batch adds the check
    for a deleted run of its id; the store's other runs change nothing."""
    other = _chain("run-b", 3)
    store.append(other)
    events = _chain("run-a", 1 + 2 * 512)
    statements = _statements(store)
    store.append(events[:1])  # one event: SQLite picks its id
    first = list(statements)
    statements.clear()
    store.append(events[1:513])
    second = list(statements)
    statements.clear()
    store.append(events[513:])
    store._db.set_trace_callback(None)
    assert first == [
        "BEGIN IMMEDIATE",
        "SELECT events, head_hash,",
        "SELECT deleted_at FROM",
        "INSERT INTO events",
        "INSERT INTO payloads",
        "INSERT INTO runs",
        "COMMIT",
    ]
    batch = [
        "BEGIN IMMEDIATE",
        "SELECT r.events, r.head_hash,",
        "INSERT INTO events",
        "INSERT INTO payloads",
        "UPDATE runs SET",
        "COMMIT",
    ]
    assert second == batch
    assert statements == batch
    assert list(store.read("run-a")) == events
    assert list(store.read("run-b")) == other
    ids = [r[0] for r in store._db.execute("SELECT id FROM events ORDER BY id")]
    assert ids == list(range(1, len(events) + len(other) + 1))
    assert verify_stored(store, "run-a").ok


def test_a_batch_reports_its_first_refused_event_as_the_memory_store_does(
    store: SQLiteStore,
) -> None:
    """Rows wait to go in many to a statement; a refusal found in Python later in the batch
    (a gap, a wrong head) still comes after the table's refusal of an earlier row."""
    stored = _chain("run-a", 3)
    clash = _chain("run-x", 2, event_id_at={0: stored[1].event_id})
    gap = _chain("run-y", 3)
    wrong_head = dataclasses.replace(clash[1], prev_hash="sha256:" + "0" * 64)
    batches = [[clash[0], gap[0], gap[2]], [clash[0], wrong_head], [*gap[:2], clash[0], gap[2]]]
    for batch in batches:
        errors = []
        for engine in (store, MemoryStore()):
            engine.append(stored)
            with pytest.raises(TachographError) as info:
                engine.append(batch)
            errors.append((type(info.value), info.value.run_id, info.value.seq))
        assert errors[0] == errors[1] == (DuplicateConflict, "run-x", 0)
        assert store.count_events() == 3


@pytest.mark.parametrize("pending", [3, 600])
def test_a_refusal_met_when_a_duplicate_flushes_the_batch_is_the_one_reported(
    tmp_path: Path, pending: int
) -> None:
    """A duplicate later in a batch makes the store insert the rows waiting before it; when
    one of those is refused (its event id stored in another run), that refusal is reported,
    as by the memory store, and nothing is stored. (The rows were inserted a second time on
    the way out, and their clash with themselves was reported instead.)"""
    errors = []
    for engine in (SQLiteStore(tmp_path / "s.db"), MemoryStore()):
        stored = _chain("run-a", 1)
        engine.append(stored)
        run = _chain("run-h", pending + 1, event_id_at={pending: stored[0].event_id})
        with pytest.raises(TachographError) as info:
            engine.append([*run, run[0]])  # run[0] again: a duplicate, after the clash
        error = info.value
        errors.append(
            (type(error), error.run_id, error.seq, "stored at 'run-a' seq 0" in str(error))
        )
        assert engine.count_events() == 1
        assert engine.head("run-h") is None
        engine.close()
    assert errors[0] == errors[1] == (DuplicateConflict, "run-h", pending, True)


def test_an_event_id_stored_elsewhere_is_named_from_inside_a_many_row_statement(
    store: SQLiteStore,
) -> None:
    """The row a many-row statement is refused for is found and named; nothing of the batch
    stays, and the batch without the clash goes in afterwards."""
    stored = _chain("run-a", 3)
    store.append(stored)
    clashing = _chain("run-c", 300, event_id_at={200: stored[1].event_id})
    with pytest.raises(DuplicateConflict, match="already stored at 'run-a' seq 1") as info:
        store.append(clashing)
    assert (info.value.run_id, info.value.seq) == ("run-c", 200)
    assert info.value.expected == stored[1].hash
    assert info.value.actual == clashing[200].hash
    assert store.count_events() == 3
    assert store.head("run-c") is None
    store.append(clashing[:200])
    assert store.head("run-c") == (199, clashing[199].hash)
    # a batch of one (an intent's commit) takes the other path: the same answer
    with pytest.raises(DuplicateConflict, match="already stored at 'run-a' seq 1") as info:
        store.append([clashing[200]])
    assert (info.value.run_id, info.value.seq) == ("run-c", 200)
    assert store.head("run-c") == (199, clashing[199].hash)


# -- schema version and migrations ----------------------------------------------------------------


def test_audit_of_pages_through_the_records_of_one_action(store: SQLiteStore) -> None:
    """``audit_of`` asks SQLite for one action's records a thousand at a time: 2,400 of them
    among 3,600, across three pages, in order, each the record ``read_audit`` streams."""
    from tachograph.store.audit import AuditEntry

    db = store._db
    db.execute("BEGIN IMMEDIATE")
    for i in range(3_600):
        action = "retention.delete" if i % 3 else "read"
        store._audit_locked(db, AuditEntry(action=action, actor="t", detail={"i": i}))
    db.execute("COMMIT")
    everything = list(store.read_audit())
    deleted = list(store.audit_of("retention.delete", tenant="default"))
    assert len(deleted) == 2_400
    assert deleted == [r for r in everything if r.action == "retention.delete"]
    assert [r.detail["i"] for r in store.audit_of("read")] == list(range(0, 3_600, 3))


def test_the_schema_version_is_recorded(store: SQLiteStore, path: Path) -> None:
    assert store.schema_version == SCHEMA_VERSION == len(sqlite_module.MIGRATIONS) + 1
    raw = sqlite3.connect(path)
    try:
        meta = dict(raw.execute("SELECT key, value FROM meta").fetchall())
    finally:
        raw.close()
    assert meta == {"schema_version": str(SCHEMA_VERSION), "format_version": "1"}


def test_a_newer_schema_is_refused(path: Path) -> None:
    SQLiteStore(path).close()
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    raw.close()
    for opener in (lambda: SQLiteStore(path), lambda: open_store(str(path), create=False)):
        with pytest.raises(SchemaVersionError) as info:
            opener()
        err = info.value
        assert (err.expected, err.actual) == (SCHEMA_VERSION, SCHEMA_VERSION + 1)
        assert "upgrade tachograph" in str(err)
        assert err.location == str(path)


def test_an_older_schema_is_migrated_forward(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SQLiteStore(path)
    events = build_run("run-a", 3)
    store.append(events)
    store.close()
    monkeypatch.setattr(sqlite_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setattr(
        sqlite_module,
        "MIGRATIONS",
        {
            **sqlite_module.MIGRATIONS,
            SCHEMA_VERSION: (
                "ALTER TABLE runs ADD COLUMN note TEXT;\nCREATE INDEX runs_actor ON runs (actor);\n"
            ),
        },
    )
    store = SQLiteStore(path)
    try:
        assert store.schema_version == SCHEMA_VERSION + 1
        columns = [r[1] for r in store._db.execute("PRAGMA table_info(runs)")]
        assert "note" in columns
        assert list(store.read("run-a")) == events
    finally:
        store.close()
    fresh = SQLiteStore(path.with_name("fresh.db"))  # a new store is created at the newest
    try:
        assert fresh.schema_version == SCHEMA_VERSION + 1
    finally:
        fresh.close()


def test_a_version_1_store_gains_the_run_indexes(path: Path) -> None:
    raw = sqlite3.connect(path, isolation_level=None)  # the version 1 layout exactly
    for statement in sqlite_module._statements(sqlite_module._SCHEMA_V1):
        raw.execute(statement)
    raw.execute("INSERT INTO meta VALUES ('schema_version', '1'), ('format_version', '1')")
    raw.close()
    events = build_run("run-a", 3)
    store = SQLiteStore(path)
    try:
        store.append(events)
        assert store.schema_version == SCHEMA_VERSION
        indexes = {r[0] for r in store._db.execute("SELECT name FROM sqlite_master")}
        assert {"runs_run_id", "runs_started_run"} <= indexes
        assert "runs_started" not in indexes
        plan = store._db.execute(
            "EXPLAIN QUERY PLAN SELECT tenant FROM runs WHERE run_id=?", ("run-a",)
        ).fetchall()
        assert "runs_run_id" in str(plan)
        assert list(store.read("run-a")) == events
    finally:
        store.close()


def test_a_failing_migration_changes_nothing(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    SQLiteStore(path).close()
    monkeypatch.setattr(sqlite_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setattr(
        sqlite_module,
        "MIGRATIONS",
        {
            **sqlite_module.MIGRATIONS,
            SCHEMA_VERSION: "ALTER TABLE runs ADD COLUMN note TEXT;\nTHIS IS NOT SQL;\n",
        },
    )
    with pytest.raises(StoreUnavailable):
        SQLiteStore(path)
    monkeypatch.undo()
    store = SQLiteStore(path)
    try:
        assert store.schema_version == SCHEMA_VERSION
        columns = [r[1] for r in store._db.execute("PRAGMA table_info(runs)")]
        assert "note" not in columns  # the first statement was rolled back with the second
    finally:
        store.close()


def test_a_version_2_store_gains_an_empty_seal_log(path: Path) -> None:
    raw = sqlite3.connect(path, isolation_level=None)  # build the version 2 layout exactly
    for statement in sqlite_module._statements(sqlite_module._SCHEMA_V1):
        raw.execute(statement)
    for statement in sqlite_module._statements(sqlite_module.MIGRATIONS[1]):
        raw.execute(statement)
    raw.execute("INSERT INTO meta VALUES ('schema_version', '2'), ('format_version', '1')")
    raw.close()
    store = SQLiteStore(path)
    try:
        assert store.schema_version == SCHEMA_VERSION
        assert store.seal_count("default") == 0
        assert store.latest_checkpoint("default") is None
        events = build_run("run-a", 3)
        store.append(events)
        assert list(store.read("run-a")) == events
    finally:
        store.close()


def test_seal_rows_refuse_update_and_delete(store: SQLiteStore) -> None:
    from tachograph.store.base import CheckpointRow, SealRow

    store.append_seals("default", [SealRow("r", 0, b"leaf")])
    store.put_checkpoint(CheckpointRow("default", 1, "note", "1 x"))
    for sql in (
        "UPDATE seals SET leaf=x'00'",
        "DELETE FROM seals",
        "UPDATE checkpoints SET note='other'",
        "DELETE FROM checkpoints",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            store._db.execute(sql)


def test_a_file_that_is_not_a_database_is_store_unavailable(path: Path) -> None:
    path.write_bytes(b"this is not an SQLite database, just some bytes " * 100)
    with pytest.raises(StoreUnavailable) as info:
        SQLiteStore(path)
    assert isinstance(info.value, TachographError)
    assert info.value.location == str(path)


# -- where the store is ---------------------------------------------------------------------------


def test_default_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TACHOGRAPH_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    assert DEFAULT_STORE == "sqlite:///.tachograph/tachograph.db"
    store = open_store()
    try:
        assert isinstance(store, SQLiteStore)
        store.append(build_run("run-a", 1))
        assert Path(store.path).resolve() == tmp_path / ".tachograph" / "tachograph.db"
    finally:
        store.close()
    assert (tmp_path / ".tachograph" / "tachograph.db").is_file()


@pytest.mark.parametrize("form", ["url", "plain path"])
def test_tachograph_store_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    target = tmp_path / "from-env" / "runs.db"
    monkeypatch.setenv("TACHOGRAPH_STORE", f"sqlite:///{target}" if form == "url" else str(target))
    monkeypatch.chdir(tmp_path)
    store = open_store()
    try:
        assert isinstance(store, SQLiteStore)
        assert Path(store.path).resolve() == target
    finally:
        store.close()
    assert target.is_file()
    assert not (tmp_path / ".tachograph").exists()
    explicit = open_store(tmp_path / "explicit.db")  # an argument beats the environment
    try:
        assert isinstance(explicit, SQLiteStore)
        assert Path(explicit.path) == tmp_path / "explicit.db"
    finally:
        explicit.close()


def test_create_false_on_a_missing_store_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TACHOGRAPH_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    expected = tmp_path / ".tachograph" / "tachograph.db"
    with pytest.raises(StoreNotFound) as info:
        open_store(create=False)
    assert info.value.location == str(expected)
    assert str(expected) in str(info.value)
    assert not (tmp_path / ".tachograph").exists()  # looking created nothing
    elsewhere = tmp_path / "nested" / "missing.db"
    with pytest.raises(StoreNotFound) as info:
        open_store(f"sqlite:///{elsewhere}", create=False)
    assert str(elsewhere) in str(info.value)
    assert not elsewhere.parent.exists()


def test_url_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = open_store("sqlite:///rel/runs.db")
    absolute = open_store(f"sqlite:///{tmp_path / 'abs.db'}")
    memory = open_store("sqlite:///:memory:")
    try:
        assert isinstance(relative, SQLiteStore)
        assert isinstance(absolute, SQLiteStore)
        assert (tmp_path / "rel" / "runs.db").is_file()
        assert (tmp_path / "abs.db").is_file()
        memory.append(build_run("run-a", 2))
        assert memory.verify("run-a").ok
        assert open_store(memory) is memory
    finally:
        relative.close()
        absolute.close()
        memory.close()
    with pytest.raises(StoreError, match=r"known schemes: .*sqlite:///path\.db"):
        open_store("nosuchengine://localhost/runs")


def test_run_not_found_names_the_file_and_suggests(store: SQLiteStore, path: Path) -> None:
    store.append(build_run("refund-0042", 1))
    with pytest.raises(RunNotFound) as info:
        store.run_info("refund-0024")
    message = str(info.value)
    assert "did you mean refund-0042?" in message
    assert str(path) in message
    assert isinstance(info.value, KeyError)


def test_integrity_check_and_raw_payload(store: SQLiteStore) -> None:
    events = build_run("run-a", 2)
    store.append(events)
    assert store.integrity_check() == "ok"
    raw = store.raw_payload(events[1].event_id)
    assert raw is not None
    assert orjson.loads(raw) == events[1].payload
    assert store.raw_payload("0" * 26) is None


class _RunId(str):
    """A run id of a str subclass (as an enum of str, or numpy's str_, would be)."""


def test_a_run_read_by_a_str_subclass_or_an_int_id_reads_as_stored(tmp_path: Path) -> None:
    from tachograph.store import read_verified

    with SQLiteStore(tmp_path / "s.db") as store:
        store.append(build_run("12345", 6, status="ok"))
        plain = list(store.read("12345"))
        assert all(e.run_id == "12345" and e.tenant == "default" for e in plain)
        for run_id, tenant in ((_RunId("12345"), None), ("12345", _RunId("default"))):
            events = list(store.read(run_id, tenant=tenant))
            assert events == plain
            # the events carry plain strings, as stored: they verify and append anywhere
            assert {(type(e.run_id), type(e.tenant)) for e in events} == {(str, str)}
            held, report = read_verified(store, run_id, tenant=tenant)
            assert report.ok, report.render()
            assert held == plain
        # an int matches the column's text by its affinity, as it always has
        held, report = read_verified(store, 12345)  # type: ignore[arg-type]
        assert report.ok, report.render()
        assert held == plain


def test_events_holds_a_run_with_the_collector_paused_and_leaves_it_as_found(
    tmp_path: Path,
) -> None:
    import gc

    seen: list[bool] = []

    class Watching(SQLiteStore):
        def read(self, run_id: str, **options: Any) -> Iterator[Event]:
            for event in super().read(run_id, **options):
                seen.append(gc.isenabled())
                yield event

    with Watching(tmp_path / "s.db") as store:
        store.append(build_run("run-a", 5, status="ok"))
        assert gc.isenabled()
        assert store.events("run-a") == list(SQLiteStore.read(store, "run-a"))
        assert seen == [False] * 5  # paused while the run was read whole
        assert gc.isenabled()
        with pytest.raises(RunNotFound):
            store.events("run-none")
        assert gc.isenabled()  # a failed read turns it back on too
        gc.disable()
        try:
            store.events("run-a")
            assert not gc.isenabled()  # off before: left off
        finally:
            gc.enable()


_KEY_VALUES = st.one_of(
    st.sampled_from(["default", "acme", "a", "b", "run-1", "run-10", "run-2", "", "é", "Z"]),
    st.integers(-3, 3),  # stored as text by the columns' affinity
    st.binary(max_size=3),  # a forger's BLOB keeps its storage class
)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(_KEY_VALUES, _KEY_VALUES, st.integers(0, 3)), max_size=30),
    st.lists(st.tuples(_KEY_VALUES, _KEY_VALUES), max_size=5),
)
def test_run_keys_skip_through_the_index_to_what_a_distinct_scan_reads(
    events: list[tuple[Any, Any, int]], summaries: list[tuple[Any, Any]]
) -> None:
    """``run_keys`` skips from run to run through the events index instead of reading every
    entry: the same keys, in the same order, as the union of the summaries and a ``SELECT
    DISTINCT`` over the events, whatever a forger stored in the key columns (orphaned
    events, summaries without events, integers, blobs, the empty string)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "keys.db"
        SQLiteStore(path).close()
        db = sqlite3.connect(path, isolation_level=None)
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'"):
            db.execute(f"DROP TRIGGER {name}")
        for i, (tenant, run_id, seq) in enumerate(events):
            db.execute(
                "INSERT OR IGNORE INTO events (tenant, run_id, seq, event_id, ts, type, actor, "
                "payload_digest, hash) VALUES (?, ?, ?, ?, 't', 'x', 'a', 'd', 'h')",
                (tenant, run_id, seq, f"e{i}"),
            )
        for tenant, run_id in summaries:
            db.execute(
                "INSERT OR IGNORE INTO runs (tenant, run_id, actor, started_at, last_at, events,"
                " head_hash) VALUES (?, ?, 'a', 't', 't', 1, 'h')",
                (tenant, run_id),
            )
        distinct = db.execute(
            "SELECT tenant, run_id FROM runs UNION SELECT DISTINCT tenant, run_id FROM events "
            "ORDER BY tenant, run_id"
        ).fetchall()
        db.close()
        with SQLiteStore(path) as store:
            assert store.run_keys() == [(str(t), str(r)) for t, r in distinct]


def _steps(store: SQLiteStore, call: Callable[[], Any]) -> tuple[int, Any]:
    """SQLite virtual-machine steps of ``call()``, and what it returned or raised."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    store._db.set_progress_handler(count, 1)
    try:
        answer = call()
    except Exception as exc:  # the caller checks what it was
        answer = exc
    finally:
        store._db.set_progress_handler(None, 1)
    return steps, answer


def _listing_steps(store: SQLiteStore, **filters: Any) -> tuple[int, list[str]]:
    """SQLite virtual-machine steps of one ``store.runs(**filters)``, and its run ids."""
    steps, page = _steps(store, lambda: store.runs(**filters))
    return steps, [r.run_id for r in page]


def test_a_page_of_one_tenant_s_runs_does_not_sort_all_of_them(tmp_path: Path) -> None:
    """Schema 5 lists a tenant's runs newest first by index: before it, a store scoped to a
    tenant (or runs(tenant=...)) found the tenant's runs by the primary key and sorted every
    one of them for each page (46 ms a page for 270,000 runs, 0.07 ms unscoped)."""
    steps: dict[int, dict[str, int]] = {}
    for count in (40, 1_200):
        path = tmp_path / f"{count}.db"
        with SQLiteStore(path) as store:
            batch: list[Event] = []
            for i in range(count):
                # two runs a second: ties, ordered by run id
                second = f"2026-12-07T10:{i // 120:02d}:{i // 2 % 60:02d}"
                for tenant in ("a", "b"):
                    batch += build_run(
                        f"run-{i:05d}",
                        2,
                        tenant=tenant,
                        ts=lambda seq, at=second: f"{at}.{seq:06d}Z",
                    )
            store.append(batch)
        cases = {
            "scoped": {},
            "tenant": {"tenant": "a"},
            "unfinished": {"tenant": "a", "status": "unfinished"},
            "since": {"tenant": "a", "since": "2026-12-07T10:00:00Z"},
        }
        steps[count] = {}
        for name, filters in cases.items():
            scoped = name == "scoped"
            with SQLiteStore(path, tenant="a" if scoped else None) as store:
                taken, page = _listing_steps(store, limit=20, **filters)
                # newest first, ties by run id: what the unscoped listing gives for tenant a
                everything = sorted(
                    (r for r in store.runs() if r.tenant == "a"),
                    key=lambda r: r.run_id,
                )
                everything.sort(key=lambda r: r.started_at, reverse=True)
                assert page == [r.run_id for r in everything][:20]
            steps[count][name] = taken
    for name, few in steps[40].items():
        # thirty times the runs: the same page, read in about as many steps
        assert steps[1_200][name] < 2 * few, (name, few, steps[1_200][name])


def test_a_page_of_one_actor_s_runs_does_not_sort_all_of_them(path: Path) -> None:
    """Schema 6 lists one actor's runs newest first by index (`tacho runs --actor NAME`):
    before it SQLite read every run of the store and sorted the actor's, 22 ms for a page
    of 20 among 200,000 runs and 93 ms for an actor with a single run."""
    steps: dict[int, dict[str, int]] = {}
    for count in (200, 4_000):
        db = path.with_name(f"actors-{count}.db")
        with SQLiteStore(db) as store:
            batch: list[Event] = []
            for i in range(count):
                second = f"2026-12-07T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}"
                actor = "rare" if i == 7 else f"agent-{i % 10}"
                batch += build_run(
                    f"run-{i:05d}",
                    2,
                    actor=actor,
                    tenant=f"t{i % 2}",
                    ts=lambda seq, at=second: f"{at}.{seq:06d}Z",
                )
            store.append(batch)
            steps[count] = {}
            cases: dict[str, dict[str, Any]] = {
                "common": {"actor": "agent-3", "limit": 20},
                "rare": {"actor": "rare"},
                "with tenant": {"actor": "agent-3", "tenant": "t1", "limit": 20},
            }
            for name, filters in cases.items():
                taken, page = _listing_steps(store, **filters)
                everything = [
                    r.run_id
                    for r in store.runs()
                    if r.actor == filters["actor"] and filters.get("tenant") in (None, r.tenant)
                ]
                assert page == everything[: filters.get("limit")], name
                steps[count][name] = taken
    for name, few in steps[200].items():
        # twenty times the runs: the same page, read in about as many steps
        assert steps[4_000][name] < 2 * few, (name, few, steps[4_000][name])


def test_a_page_of_one_status_s_runs_does_not_sort_all_of_them(path: Path) -> None:
    """Schema 8 lists the runs of one status newest first by index (`tacho runs --status
    error`, or `unfinished`): before it SQLite read every run of the store and sorted those
    of the status, 31 ms for a page among 200,000 runs. A run's status is set by the batch
    that finishes it, whether that batch starts the run or not."""
    steps: dict[int, dict[str, int]] = {}
    for count in (200, 4_000):
        db = path.with_name(f"statuses-{count}.db")
        with SQLiteStore(db) as store:
            batch: list[Event] = []
            for i in range(count):
                second = f"2026-12-07T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}"
                status = "error" if i in (3, count - 3) else None if i % 5 == 1 else "ok"
                events = build_run(
                    f"run-{i:05d}", 3, status=status, ts=lambda seq, at=second: f"{at}.{seq:06d}Z"
                )
                if i % 7 == 0:
                    store.append(events[:2])  # finished by a later batch of its own
                    batch += events[2:]
                else:
                    batch += events
            store.append(batch)
            steps[count] = {}
            cases: dict[str, dict[str, Any]] = {
                "error": {"status": "error"},
                "unfinished": {"status": "unfinished", "limit": 20},
                "ok": {"status": "ok", "limit": 20},
            }
            for name, filters in cases.items():
                taken, page = _listing_steps(store, **filters)
                wanted = None if filters["status"] == "unfinished" else filters["status"]
                everything = [r.run_id for r in store.runs() if r.status == wanted]
                assert page == everything[: filters.get("limit")], name
                steps[count][name] = taken
            assert [r.run_id for r in store.runs(status="error")] == [
                f"run-{count - 3:05d}",
                "run-00003",
            ]
    for name, few in steps[200].items():
        # twenty times the runs: the same page, read in about as many steps
        assert steps[4_000][name] < 2 * few, (name, few, steps[4_000][name])


def test_the_records_of_one_audit_action_are_read_by_index(path: Path) -> None:
    """Schema 7 reads the store audit's records of one action (``audit_of``, which
    verification asks for a tenant whose sealed runs retention deleted) by an index on
    ``(action, seq)``: before it SQLite read the whole audit, which every audited read
    lengthens (52 ms a call for 1,000,000 records)."""
    from tachograph.store.audit import AuditEntry

    steps: dict[int, dict[str, int]] = {}
    for count in (100, 3_000):
        with SQLiteStore(path.with_name(f"audit-{count}.db"), synchronous="normal") as store:
            deletions = [6, count - 5]  # of tenants t0 and t1 (record i is of t{i % 2})
            for i in range(count):
                action = "retention.delete" if i in deletions else "read"
                store.append_audit(AuditEntry(action=action, actor="x", tenant=f"t{i % 2}"))
            steps[count] = {}
            for tenant in (None, "t1"):
                of = functools.partial(store.audit_of, "retention.delete", tenant=tenant)
                taken, found = _steps(store, lambda of=of: list(of()))
                wanted = [s for s in deletions if tenant in (None, f"t{s % 2}")]
                assert [r.seq for r in found] == wanted, (count, tenant)
                steps[count][str(tenant)] = taken
    for tenant, few in steps[100].items():
        # thirty times the records: the same two found in about as many steps
        assert steps[3_000][tenant] < 2 * few, (tenant, few, steps[3_000][tenant])


_edge_chars = st.sampled_from(["a", "b", "z", "\ud7ff", "\ue000", "\U0010ffff", "\U0010fffe", "."])


@given(st.text(_edge_chars, max_size=4), st.text(_edge_chars, max_size=6))
def test_the_prefix_bound_makes_a_prefix_a_range(prefix: str, text: str) -> None:
    """``prefix <= s < prefix_bound(prefix)`` exactly when ``s`` begins with ``prefix``, in
    code point order (which UTF-8's byte order, SQLite's BINARY collation, keeps)."""
    from tachograph.store.base import prefix_bound

    bound = prefix_bound(prefix)
    in_range = prefix <= text and (bound is None or text < bound)
    assert in_range == text.startswith(prefix)
    assert (text.encode("utf-8") >= prefix.encode("utf-8")) == (text >= prefix)


def test_the_prefix_bound_of_its_edges() -> None:
    from tachograph.store.base import prefix_bound

    assert prefix_bound("run_01") == "run_02"
    assert prefix_bound("a\U0010ffff") == "b"
    assert prefix_bound("\U0010ffff") is None
    assert prefix_bound("a\ud7ff") == "a\ue000"  # no string holds a surrogate
    assert prefix_bound("") is None


def test_a_prefix_lists_by_the_run_id_index(path: Path) -> None:
    """The runs a prefix begins are a range of the run id index, not a scan of every run
    (what `tacho show PREFIX` asks: it listed every run of the store, 1 s for 300,000)."""
    steps: dict[int, int] = {}
    for count in (50, 2_000):
        db = path.with_name(f"prefix-{count}.db")
        with SQLiteStore(db) as store:
            store.append([e for i in range(count) for e in build_run(f"run-{i:05d}", 1)])
            steps[count], found = _listing_steps(store, prefix="run-0004")
            assert found == [f"run-{i:05d}" for i in range(49, 39, -1)]
    assert steps[2_000] < 2 * steps[50], steps


def test_an_unknown_run_reads_its_neighbours_not_every_run(path: Path) -> None:
    """An unknown id reads the 100 ids on each side of it in the run id index (the primary key
    within a tenant) for its close matches, and finds an orphan's tenant by seeking each
    tenant of the events: before, it read every run id and every event of the store (50 ms
    for 50,000 runs of 3 events). The matches are the ones all ids, sorted, give."""
    from tachograph.store.base import suggest

    steps: dict[int, dict[str, int]] = {}
    for count in (150, 3_000):
        db = path.with_name(f"unknown-{count}.db")
        ids = [f"run-{i:05d}" for i in range(count)]
        with SQLiteStore(db) as store:
            store.append([e for r in ids for e in build_run(r, 3)])
            steps[count] = {}
            for asked, tenant in (("run-0007x", None), ("run-0007x", "default"), ("zz", None)):
                lookup = functools.partial(store.run_info, asked, tenant=tenant)
                taken, err = _steps(store, lookup)
                assert isinstance(err, RunNotFound), err
                assert err.suggestions == suggest(asked, sorted(ids)), (count, asked)
                steps[count][f"{asked} {tenant}"] = taken
    for case, few in steps[150].items():
        # twenty times the runs and events: about as many steps
        assert steps[3_000][case] < 2 * few, (case, few, steps[3_000][case])


def test_an_orphan_run_is_found_by_its_id_alone(path: Path) -> None:
    """A run whose summary row is gone (its events kept) still resolves without its tenant,
    through the skip-scan of the events' tenants; an id two tenants hold so is ambiguous."""
    with SQLiteStore(path) as store:
        store.append(build_run("run-o", 3, tenant="acme"))
        for tenant in ("acme", "globex"):
            store.append(build_run("run-two", 2, tenant=tenant))
    raw = sqlite3.connect(path)
    raw.execute("DELETE FROM runs WHERE run_id IN ('run-o', 'run-two')")
    raw.commit()
    raw.close()
    with SQLiteStore(path) as store:
        events = list(store.read("run-o"))
        assert [(e.tenant, e.seq) for e in events] == [("acme", 0), ("acme", 1), ("acme", 2)]
        with pytest.raises(StoreError, match="several tenants"):
            list(store.read("run-two"))
        with pytest.raises(RunNotFound):
            list(store.read("run-x"))
