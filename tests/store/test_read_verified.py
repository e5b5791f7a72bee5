"""What replay, fork and resume load (``read_verified``): a run read once, each page checked
on a thread of its own while the next is read. The events and the report must be those of a
read followed by ``verify_stored``, tampered rows included, and a read that fails must raise as
it raises."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tachograph.record.event import Event, new_event
from tachograph.store import SQLiteStore, read_verified, verify_stored

RUN = "run-loaded"
LENGTH = 4_321  # five pages of checks, the last a short one


def _events(n: int) -> list[Event]:
    out, prev = [], None
    for seq in range(n):
        payload = {"i": seq, "price": 25.0, "名": "é" * (seq % 3), "ratio": 0.1 + 0.2 * (seq % 2)}
        e = new_event(run_id=RUN, seq=seq, type="decision", actor="agent", payload=payload,
                      prev_hash=prev)  # fmt: skip
        out.append(e)
        prev = e.hash
    return out


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "loaded.db") as st:
        events = _events(LENGTH)
        for i in range(0, LENGTH, 1000):
            st.append(events[i : i + 1000])
        yield st


def test_a_long_run_loads_with_the_report_of_verify(store: SQLiteStore) -> None:
    events, report = read_verified(store, RUN)
    assert report.ok
    assert report == verify_stored(store, RUN)
    assert [e.seq for e in events] == list(range(LENGTH))
    assert events == list(store.read(RUN))


@pytest.mark.parametrize("seq", [0, 999, 1000, 2160, 4000, LENGTH - 1])
def test_a_tampered_row_anywhere_is_reported_as_verify_reports_it(
    store: SQLiteStore, seq: int
) -> None:
    db = sqlite3.connect(store.path)  # the file's owner, past its append-only triggers
    try:
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'").fetchall():
            db.execute(f'DROP TRIGGER "{name}"')
        db.execute(
            "UPDATE payloads SET body = CAST(replace(CAST(body AS TEXT), '\"i\"', '\"j\"') AS BLOB)"
            " WHERE id = (SELECT id FROM events WHERE run_id = ? AND seq = ?)",
            (RUN, seq),
        )
        db.commit()
    finally:
        db.close()
    events, report = read_verified(store, RUN)
    assert not report.ok
    assert report == verify_stored(store, RUN)
    first = report.first_failure
    assert first is not None
    assert first.seq == seq
    assert len(events) == LENGTH


class _Breaking(SQLiteStore):
    """A store whose read fails partway, as a damaged page would make it."""

    fail_at = 2_500

    def read(self, run_id: str, **kwargs: Any) -> Iterator[Event]:
        for i, event in enumerate(super().read(run_id, **kwargs)):
            if i == self.fail_at:
                raise sqlite3.DatabaseError("database disk image is malformed")
            yield event


def test_a_read_that_fails_is_raised_as_it_is(store: SQLiteStore) -> None:
    path = store.path
    store.close()
    with _Breaking(path) as breaking, pytest.raises(sqlite3.DatabaseError, match="malformed"):
        read_verified(breaking, RUN)


def test_loads_in_several_threads_at_once_agree(store: SQLiteStore) -> None:
    # each load starts threads of its own for its pages; the spare arrays they share are taken
    # and given back with the GIL held
    import threading

    want = verify_stored(store, RUN)
    results: list[bool] = []
    errors: list[BaseException] = []

    def load() -> None:
        try:
            for _ in range(3):
                events, report = read_verified(store, RUN)
                results.append(report == want and len(events) == LENGTH)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert results == [True] * 12
