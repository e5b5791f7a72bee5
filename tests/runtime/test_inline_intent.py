"""A durable intent on an idle writer is appended on the caller's thread; with the writer busy
it goes through the queue; either way the store sees every run's events in order."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tachograph as tg
from tachograph.capture.recorder import Recorder, close_writer
from tachograph.record.event import Event
from tachograph.store.base import Receipt


class ThreadNotingStore(tg.SQLiteStore):
    """A real SQLite store that notes which thread appended each event."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.appended_by: list[tuple[int, str, str]] = []

    def append(
        self, events: Sequence[Event], *, durable: bool = True, **options: Any
    ) -> list[Receipt]:
        name = threading.current_thread().name
        self.appended_by.extend((e.seq, e.type, name) for e in events)
        return super().append(events, durable=durable, **options)


@tg.tool(effect="write")
def save(text: str) -> str:
    return text


def test_a_durable_event_on_an_idle_writer_is_appended_by_its_caller(tmp_path: Path) -> None:
    store = ThreadNotingStore(tmp_path / "runs.db")
    rec = Recorder(store, run_id="inline", actor="a")
    rec.append("run.started", {"input": None, "env": {}})
    rec.flush()  # the writer is idle now
    rec.append("acme.intent", {"n": 1}, durable=True)
    assert store.appended_by[-1] == (1, "acme.intent", threading.current_thread().name)
    assert store.appended_by[0] == (0, "run.started", "tachograph-writer")
    rec.append("run.finished", {"status": "ok", "output": None})
    rec.flush()
    close_writer(store)
    assert store.verify("inline").ok


def test_a_recorded_write_tool_keeps_its_run_in_order(tmp_path: Path) -> None:
    store = ThreadNotingStore(tmp_path / "runs.db")
    with tg.record(store, actor="a", run_id="tool", durability="effects"):
        for n in range(20):
            save(str(n))
    close_writer(store)
    seqs = [seq for seq, _, _ in store.appended_by]
    assert seqs == list(range(len(seqs)))
    assert len(seqs) == 42
    assert store.verify("tool").ok


def test_durable_appends_from_many_threads_keep_every_run_in_order(tmp_path: Path) -> None:
    store = ThreadNotingStore(tmp_path / "runs.db")
    recorders = [Recorder(store, run_id=f"r{i}", actor="a") for i in range(4)]

    def work(rec: Recorder) -> None:
        rec.append("run.started", {"input": None, "env": {}})
        for n in range(60):
            # a mix of durable events (claimed inline when the writer is idle) and queued ones
            rec.append("acme.note", {"n": n}, durable=n % 3 == 0)
        rec.append("run.finished", {"status": "ok", "output": None}, durable=True)

    threads = [threading.Thread(target=work, args=(r,)) for r in recorders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    close_writer(store)
    for i in range(4):
        report = store.verify(f"r{i}")
        assert report.ok, report
        assert [e.seq for e in store.read(f"r{i}")] == list(range(62))
