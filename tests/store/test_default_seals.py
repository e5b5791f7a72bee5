"""Every engine with a seal log is sealed by default: what a recording leaves in it.

Seals live in the seal log, never among the run's events: the event count and the run
summary are those of an unsealed recording.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tachograph.capture.recorder import Recorder, close_writer
from tachograph.capture.seals import SealPolicy
from tachograph.record.merkle import SealLeaf
from tachograph.store import open_store
from tachograph.store.base import Store


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        url = "memory://"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'seals.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    opened = open_store(url)
    try:
        yield opened
    finally:
        close_writer(opened)
        opened.close()


def _record(store: Store, run_id: str, events: int, *, finish: bool = True, **kw: object) -> None:
    recorder = Recorder(store, run_id=run_id, actor="agent", observers=[], **kw)  # type: ignore[arg-type]
    recorder.append("run.started", {"input": run_id, "env": {}})
    for i in range(events - 1 - finish):
        recorder.append("decision", {"name": "step", "chosen": i})
    if finish:
        recorder.append("run.finished", {"status": "ok"})
    recorder.flush()


def test_a_finished_run_is_sealed_to_its_end_and_keeps_its_event_count(store: Store) -> None:
    # durability "every": one commit per event, so the seals fall exactly every 5 events
    _record(
        store,
        "r1",
        12,
        seal=SealPolicy(every_events=5, every_seconds=3600),
        durability="every",
    )
    assert store.count_events() == 12
    assert store.run_info("r1").events == 12
    seals = store.seals_for_run("default", "r1")
    leaves = [SealLeaf.from_bytes(s.leaf) for s in seals]
    assert leaves[-1].seq == 11
    assert leaves[-1].final
    events = {e.seq: e.hash for e in store.read("r1")}
    assert all(events[leaf.seq] == leaf.hash for leaf in leaves)
    assert [(leaf.seq, leaf.final) for leaf in leaves] == [(4, False), (9, False), (11, True)]


def test_the_default_policy_seals_at_the_end(store: Store) -> None:
    _record(store, "r2", 7)
    (seal,) = store.seals_for_run("default", "r2")
    assert SealLeaf.from_bytes(seal.leaf).final
    assert seal.seq == 6


def test_opting_out_appends_no_seal(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    _record(store, "off1", 6, seal=False)
    monkeypatch.setenv("TACHOGRAPH_SEAL", "off")
    _record(store, "off2", 6)
    assert store.seal_count("default") == 0
    assert store.count_events() == 12
