"""A run read while it is being recorded: a seal its recorder commits after the events were
read names a seq past them. Replay, fork and resume took that for a cut tail and refused the
run; the run is read again while the store shows it growing. A tail really cut stays
refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tachograph.replay import history as history_module
from tachograph.replay.history import RunHistory
from tachograph.store import SQLiteStore

from .helpers import make_key, record


def _recorded(tmp_path: Path) -> Path:
    key, _ = make_key(tmp_path / "keys")
    db = tmp_path / "store" / "t.db"
    with SQLiteStore(db) as store:
        record(store, "live", 14, key=key, finish=False)  # sealed at 4 and 9
    return db


def test_a_seal_committed_after_the_read_is_not_a_cut_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _recorded(tmp_path)
    original = history_module.read_verified
    calls = []

    def read_before_the_last_events(*args: Any, **kwargs: Any) -> Any:
        events, report = original(*args, **kwargs)
        calls.append(len(events))
        if len(calls) == 1:  # the first read saw the run before its last six events
            return events[:8], report
        return events, report

    monkeypatch.setattr(history_module, "read_verified", read_before_the_last_events)
    with SQLiteStore(db) as store:
        history = RunHistory.from_store(store, "live")
    assert calls == [14, 14]
    assert history.seal is not None
    assert history.seal.ok, history.seal.reason
    assert len(history.events) == 14


def test_a_tail_really_cut_is_still_refused(tmp_path: Path) -> None:
    db = _recorded(tmp_path)
    raw = sqlite3.connect(db, isolation_level=None)
    for trigger in ("events_append_only_delete", "payloads_no_delete"):
        raw.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    raw.execute("DELETE FROM payloads WHERE id IN (SELECT id FROM events WHERE seq >= 8)")
    raw.execute("DELETE FROM events WHERE seq >= 8")
    raw.execute(
        "UPDATE runs SET events = 8, head_hash = "
        "(SELECT hash FROM events WHERE run_id = 'live' AND seq = 7) WHERE run_id = 'live'"
    )
    raw.close()
    with SQLiteStore(db) as store:
        history = RunHistory.from_store(store, "live")
    assert history.seal is not None
    assert not history.seal.ok
