"""A run whose tail was cut: one strength of "verified" in every place that checks a run.

The attacker has write access to the SQLite file: drops the append-only triggers, deletes the
last events, and either leaves the run summary (the store's own count and head hash) alone or
rewrites it to match. The first is caught through the summary, by ``verify_stored``, by
``tacho verify`` and by what replay loads (``read_verified``), all with the same report; the
second is a chain that only a seal could show to be short, and every one of them says so alike.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from tachograph.cli.app import cli
from tachograph.record.event import Event
from tachograph.record.verify import Check, VerifyReport
from tachograph.store import MemoryStore, SQLiteStore, read_verified, verify_all, verify_stored
from tachograph.testing import build_run

RUN = "run-cut"
LENGTH = 11
KEPT = 9  # seq 9 and 10 (the run.finished) are cut


@pytest.fixture
def recorded() -> list[Event]:
    return build_run(RUN, LENGTH, status="ok")


@pytest.fixture
def path(tmp_path: Path, recorded: list[Event]) -> Path:
    path = tmp_path / "store.db"
    with SQLiteStore(path) as store:
        store.append(recorded)
        store.append(build_run("bystander", 3))
    return path


def _cut(path: Path, *, rewrite_summary: bool) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        for trigger in ("events_append_only_delete", "payloads_no_delete"):
            db.execute(f"DROP TRIGGER {trigger}")
        ids = "SELECT id FROM events WHERE run_id=? AND seq>=?"
        db.execute(f"DELETE FROM payloads WHERE id IN ({ids})", (RUN, KEPT))
        db.execute(f"DELETE FROM events WHERE id IN ({ids})", (RUN, KEPT))
        if rewrite_summary:
            (head, last_at) = db.execute(
                "SELECT hash, ts FROM events WHERE run_id=? AND seq=?", (RUN, KEPT - 1)
            ).fetchone()
            db.execute(
                "UPDATE runs SET events=?, head_hash=?, last_at=?, status=NULL WHERE run_id=?",
                (KEPT, head, last_at, RUN),
            )
    finally:
        db.close()


def _cli(path: Path, *args: str) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(cli, ["--store", str(path), "verify", *args, "--json"])
    return result.exit_code, json.loads(result.stdout)


@pytest.fixture
def runner_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TACHOGRAPH_STORE", "FORCE_COLOR", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("runner_env")
def test_a_cut_tail_is_refused_alike_by_every_check(path: Path) -> None:
    _cut(path, rewrite_summary=False)
    with SQLiteStore(path) as store:
        report = verify_stored(store, RUN)
        every = {r.run_id: r for r in verify_all(store)}
        events, loaded = read_verified(store, RUN)
        convenience = store.verify(RUN)
    assert not report.ok
    first = report.first_failure
    assert first is not None
    assert (first.seq, first.check) == (KEPT, Check.SEQUENCE)
    assert f"records {LENGTH} events" in first.message
    assert "tail is missing" in first.message
    assert report.head is None
    # the same report from the whole-store check, what replay loads, and the store convenience
    assert every[RUN] == report
    assert every["bystander"].ok
    assert loaded == report
    assert len(events) == KEPT
    assert convenience == report
    # and from the command line, one run or all of them: exit 1, the same report
    code, one = _cli(path, RUN)
    assert code == 1
    extra = ("seal", "blobs", "unvouched")  # unvouched calls: looked for in one run alone
    assert [{k: v for k, v in r.items() if k not in extra} for r in one["runs"]] == [
        report.to_dict()
    ]
    code, everything = _cli(path)
    assert code == 1
    assert (everything["verified"], everything["failed"]) == (1, 1)
    runs = everything["runs"]
    assert isinstance(runs, list)
    assert report.to_dict() in [{k: v for k, v in r.items() if k not in extra} for r in runs]


def test_the_memory_engine_gives_the_same_report_for_the_same_cut(
    path: Path, recorded: list[Event]
) -> None:
    _cut(path, rewrite_summary=False)
    with SQLiteStore(path) as sqlite_store:
        on_sqlite = verify_stored(sqlite_store, RUN)
        rows = list(sqlite_store.read_rows(RUN))
    memory = MemoryStore()
    try:
        memory.append(recorded)
        # the same cut, behind the memory engine's back
        del memory._open().rows[("default", RUN)][KEPT:]
        on_memory = verify_stored(memory, RUN)
        assert list(memory.read_rows(RUN)) == rows
    finally:
        memory.close()
    assert on_memory.to_dict() | {"source": None} == on_sqlite.to_dict() | {"source": None}


@pytest.mark.usefixtures("runner_env")
def test_a_tail_cut_with_its_summary_verifies_alike_and_unsealed(path: Path) -> None:
    # Without a seal nothing in the store says the run was ever longer: every check must say
    # the same thing, and none may claim more than "unsealed".
    _cut(path, rewrite_summary=True)
    with SQLiteStore(path) as store:
        report = verify_stored(store, RUN)
        _, loaded = read_verified(store, RUN)
        assert store.run_info(RUN).status is None
    assert report.ok, report.render()
    assert (report.events, report.sealed) == (KEPT, False)
    assert "unsealed" in report.render()
    assert loaded == report
    code, one = _cli(path, RUN)
    assert code == 0
    extra = ("seal", "blobs", "unvouched")  # unvouched calls: looked for in one run alone
    assert [{k: v for k, v in r.items() if k not in extra} for r in one["runs"]] == [
        report.to_dict()
    ]
    assert one["runs"][0]["seal"]["status"] == "unsealed"


def test_a_listed_run_that_lost_every_event_fails(path: Path) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("DROP TRIGGER events_append_only_delete")
        db.execute("DROP TRIGGER payloads_no_delete")
        ids = "SELECT id FROM events WHERE run_id=?"
        db.execute(f"DELETE FROM payloads WHERE id IN ({ids})", (RUN,))
        db.execute("DELETE FROM events WHERE run_id=?", (RUN,))
    finally:
        db.close()
    with SQLiteStore(path) as store:
        report = verify_stored(store, RUN)
    assert isinstance(report, VerifyReport)
    assert (report.run_id, report.tenant, report.events) == (RUN, "default", 0)
    assert report.first_failure is not None
    assert "holds none of its events" in report.first_failure.message


def test_replay_refuses_a_cut_tail_with_the_report_tacho_verify_gives(path: Path) -> None:
    """The replay half of 'one strength': a recorded agent run, its tail cut; replay refuses it
    with exactly the report verification gives, and the agent never runs."""
    import tachograph as tg

    calls: list[str] = []

    def agent(task: str) -> str:
        calls.append(task)
        tg.decide("route", "refund")
        return "done"

    with SQLiteStore(path) as store:
        recorded = tg.record_run(agent, "t", store=store, run_id="agent-run")
    calls.clear()
    db = sqlite3.connect(path, isolation_level=None)
    for trigger in ("events_append_only_delete", "payloads_no_delete"):
        db.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    ids = "SELECT id FROM events WHERE run_id='agent-run' AND seq>=2"
    db.execute(f"DELETE FROM payloads WHERE id IN ({ids})")
    db.execute(f"DELETE FROM events WHERE id IN ({ids})")
    db.close()
    with SQLiteStore(path) as store:
        expected = verify_stored(store, recorded.run_id)
        assert not expected.ok
        with pytest.raises(tg.Unreplayable) as refused:
            tg.replay(store, recorded.run_id, agent)
    assert refused.value.fields["report"] == expected
    first = expected.first_failure
    assert first is not None
    assert refused.value.seq == first.seq
    assert calls == []
    result = CliRunner().invoke(cli, ["--store", str(path), "verify", recorded.run_id, "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["runs"][0]["first_failure"]["seq"] == first.seq


def test_a_deleted_middle_event_is_not_reported_as_a_cut_tail(path: Path) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        for trigger in ("events_append_only_delete", "payloads_no_delete"):
            db.execute(f"DROP TRIGGER {trigger}")
        ids = "SELECT id FROM events WHERE run_id=? AND seq=?"
        db.execute(f"DELETE FROM payloads WHERE id IN ({ids})", (RUN, 5))
        db.execute(f"DELETE FROM events WHERE id IN ({ids})", (RUN, 5))
    finally:
        db.close()
    with SQLiteStore(path) as store:
        report = verify_stored(store, RUN)
    # the gap once, where it is; then the summary's count against what was found, as it is:
    # the last event, seq 10, is there
    assert [(f.seq, f.check, f.message) for f in report.failures] == [
        (5, Check.SEQUENCE, "seq is 6, expected 5: seq 5 is missing"),
        (
            LENGTH - 1,
            Check.SEQUENCE,
            f"the store's run summary records {LENGTH} events, but {LENGTH - 1} were found, "
            f"the last of them seq {LENGTH - 1}",
        ),
    ]
