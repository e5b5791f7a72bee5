"""The store conformance suite: the store contract (:mod:`tachograph.store.base`) as tests.

Every engine runs the same suite, as eventsourcing's ``tests/persistence.py`` does for its
recorders: the memory reference engine, SQLite, and any engine registered under a URL scheme.
Subclass :class:`StoreConformance` in a test module whose class name starts with ``Test`` and
implement :meth:`~StoreConformance.make_store`; pytest collects every ``test_*`` method below
for that engine::

    class TestSQLiteStore(StoreConformance):
        def make_store(self, tmp_path: Path) -> Store:
            return SQLiteStore(tmp_path / "store.db")

Engine-specific behaviour (pragmas, triggers, files, crash safety) is tested beside the engine.
"""

from __future__ import annotations

import abc
import dataclasses
import io
import random
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from ..errors import (
    AppendRefused,
    DuplicateConflict,
    RunNotFound,
    SequenceConflict,
    StoreError,
    TachographError,
)
from ..record.event import Event, EventType, new_event
from ..record.jsonl import export_run, import_jsonl
from ..record.rows import StoredRow
from ..record.verify import Check, VerifyReport, verify_run
from ..store.audit import AuditEntry
from ..store.base import Receipt, RunInfo, Store
from ..store.registry import open_store
from ..store.verify import verify_all, verify_stored
from . import build_run, fixed_ts
from .append_all_conformance import AppendAllConformance
from .seal_conformance import SealLogConformance

__all__ = ["StoreConformance"]


def _receipt(event: Event, *, duplicate: bool = False) -> Receipt:
    return Receipt(event.event_id, event.tenant, event.run_id, event.seq, event.hash, duplicate)


def _seconds_after(base: int) -> Callable[[int], str]:
    return lambda seq: fixed_ts(base + seq)


def _ids(infos: list[RunInfo]) -> list[str]:
    return [info.run_id for info in infos]


class StoreConformance(AppendAllConformance, SealLogConformance, abc.ABC):
    """What every store must do. Subclass it and implement :meth:`make_store`.

    The seal-log tests (SPEC section 9) come from :class:`SealLogConformance`.
    """

    persistent: bool = True
    """Whether a store made again from the same ``tmp_path``, or opened again from its URL, sees
    what the first one wrote (``False``: it starts empty each time, which is checked too)."""

    stream_events: int = 200_000
    """Length of the run the constant-memory read test streams."""

    @abc.abstractmethod
    def make_store(self, tmp_path: Path) -> Store:
        """Open a store kept under the existing directory ``tmp_path`` (empty on first call)."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        """A fresh, empty store; closed after the test."""
        store = self.make_store(tmp_path)
        try:
            yield store
        finally:
            store.close()

    # -- appending ------------------------------------------------------------------------

    def test_a_new_store_is_empty(self, store: Store) -> None:
        assert store.count_events() == 0
        assert store.runs() == []
        assert list(store.verify_all()) == []
        assert store.head("run-a") is None
        assert store.append([]) == []

    def test_append_returns_receipts_and_moves_the_head(self, store: Store) -> None:
        events = build_run("run-a", 4)
        assert store.append(events[:1]) == [_receipt(events[0])]
        assert store.head("run-a") == (0, events[0].hash)
        assert store.append(events[1:]) == [_receipt(e) for e in events[1:]]
        assert store.head("run-a") == (3, events[-1].hash)
        assert store.count_events() == 4

    def test_read_returns_the_events_in_order_as_appended(self, store: Store) -> None:
        events = build_run("run-a", 7, status="ok")
        store.append(events[:3])
        store.append(events[3:])
        read = list(store.read("run-a"))
        assert [e.seq for e in read] == list(range(7))
        assert read == events  # every envelope field, the hash, payload and salt
        assert store.events("run-a") == events

    def test_read_from_a_given_seq(self, store: Store) -> None:
        events = build_run("run-a", 6)
        store.append(events)
        assert list(store.read("run-a", from_seq=4)) == events[4:]
        assert list(store.read("run-a", from_seq=0)) == events
        assert list(store.read("run-a", from_seq=6)) == []

    def test_read_undecoded_leaves_the_stored_payload_bytes(self, store: Store) -> None:
        events = build_run("run-a", 3)
        store.append(events)
        for stored, original in zip(store.read("run-a", decode=False), events, strict=True):
            assert stored.payload is None
            assert isinstance(stored.payload_bytes, bytes)
            assert stored.salt == original.salt
            assert stored.hash == original.hash
        decoded = [e.payload for e in store.read("run-a")]
        assert decoded == [e.payload for e in events]

    def test_numbers_and_text_at_the_edges_of_the_profile_survive(self, store: Store) -> None:
        payload = {
            "big": 2.0**60,
            "huge": 1e300,
            "tiny": 1e-7,
            "negative_zero": -0.0,
            "integral": 3.0,
            "max_int": 2**53 - 1,
            "min_int": -(2**53 - 1),
            "text": "snowman \u2603, clef \U0001d11e, private \ue000, nul \x00",
            "\U0001f600 key": [[[]], {}],
        }
        events = build_run("run-a", 3, payload=lambda seq: payload)
        store.append(events)
        read = list(store.read("run-a"))
        assert read[1].payload == payload
        assert store.verify("run-a").ok

    def test_same_run_id_in_two_tenants_are_two_runs(self, store: Store) -> None:
        in_a = build_run("shared", 2, tenant="tenant-a")
        in_b = build_run("shared", 3, tenant="tenant-b")
        store.append(in_a + in_b)
        assert list(store.read("shared", tenant="tenant-a")) == in_a
        assert list(store.read("shared", tenant="tenant-b")) == in_b
        assert store.head("shared", tenant="tenant-a") == (1, in_a[-1].hash)
        assert store.head("shared", tenant="tenant-b") == (2, in_b[-1].hash)
        with pytest.raises(StoreError) as info:
            list(store.read("shared"))  # ambiguous without a tenant
        assert not isinstance(info.value, RunNotFound)
        assert store.verify("shared", tenant="tenant-b").events == 3

    # -- the chain is enforced ------------------------------------------------------------

    def test_append_refuses_a_gap(self, store: Store) -> None:
        events = build_run("run-a", 3)
        store.append(events[:1])
        with pytest.raises(SequenceConflict) as info:
            store.append([events[2]])
        err = info.value
        assert (err.run_id, err.seq) == ("run-a", 2)
        assert err.expected == {"seq": 1, "prev_hash": events[0].hash}
        assert err.actual == {"seq": 2, "prev_hash": events[1].hash}
        assert store.head("run-a") == (0, events[0].hash)

    def test_append_refuses_a_wrong_prev_hash(self, store: Store) -> None:
        events = build_run("run-a", 2)
        store.append(events)
        forged = new_event(
            run_id="run-a",
            seq=2,
            type=EventType.DECISION.value,
            actor="agent",
            payload={"name": "x", "chosen": 1},
            prev_hash=events[0].hash,  # not the head
        )
        with pytest.raises(SequenceConflict) as info:
            store.append([forged])
        assert info.value.expected == {"seq": 2, "prev_hash": events[1].hash}
        assert info.value.actual == {"seq": 2, "prev_hash": events[0].hash}
        assert store.count_events() == 2

    def test_a_new_run_must_start_at_seq_0(self, store: Store) -> None:
        events = build_run("run-a", 3)
        with pytest.raises(SequenceConflict):
            store.append(events[1:])
        assert store.count_events() == 0

    def test_a_partly_bad_batch_writes_nothing(self, store: Store) -> None:
        events = build_run("run-a", 6)
        store.append(events[:2])
        other = build_run("run-b", 2)
        # good, good, good (another run), then a gap: the whole batch is refused
        with pytest.raises(SequenceConflict):
            store.append([events[2], events[3], *other, events[5]])
        assert store.count_events() == 2
        assert store.head("run-a") == (1, events[1].hash)
        assert store.head("run-b") is None
        assert _ids(store.runs()) == ["run-a"]
        assert store.runs()[0].events == 2
        store.append(events[2:] + other)  # the same events, in order, are accepted
        assert store.count_events() == 8

    # -- dedupe and conflicts ---------------------------------------------------------------

    def test_appending_stored_events_again_returns_the_original_receipts(
        self, store: Store
    ) -> None:
        events = build_run("run-a", 4)
        first = store.append(events)
        again = store.append(events)
        assert again == [dataclasses.replace(r, duplicate=True) for r in first]
        assert store.count_events() == 4
        assert store.runs()[0].events == 4
        more = build_run("run-a", 2, after=(3, events[-1].hash))
        mixed = store.append([events[-1], *more])
        assert mixed == [_receipt(events[-1], duplicate=True)] + [_receipt(e) for e in more]
        assert store.count_events() == 6

    def test_a_duplicate_inside_one_batch_is_written_once(self, store: Store) -> None:
        events = build_run("run-a", 2)
        receipts = store.append([events[0], events[0], events[1]])
        assert [r.duplicate for r in receipts] == [False, True, False]
        assert store.count_events() == 2

    def test_same_seq_with_other_content_is_a_conflict(self, store: Store) -> None:
        events = build_run("run-a", 3)
        store.append(events)
        rival = build_run("run-a", 2)  # another recording under the same run id
        with pytest.raises(DuplicateConflict) as info:
            store.append(rival)
        err = info.value
        assert (err.run_id, err.seq) == ("run-a", 0)
        assert err.expected == events[0].hash
        assert err.actual == rival[0].hash
        assert list(store.read("run-a")) == events

    def test_same_event_id_with_other_content_is_a_conflict(self, store: Store) -> None:
        events = build_run("run-a", 3)
        store.append(events)
        clash = new_event(
            run_id="run-b",
            seq=0,
            type=EventType.RUN_STARTED.value,
            actor="agent",
            payload={"input": "x"},
            prev_hash=None,
            event_id=events[1].event_id,
        )
        with pytest.raises(DuplicateConflict) as info:
            store.append([*build_run("run-c", 2), clash])
        assert info.value.run_id == "run-b"
        assert info.value.expected == events[1].hash
        assert info.value.actual == clash.hash
        assert store.count_events() == 3
        assert _ids(store.runs()) == ["run-a"]

    def test_a_refusal_names_the_tenant_of_its_run(self, store: Store) -> None:
        """``err.tenant``: the tenant of the run a refusal or a miss is about (a run id may be
        a run of each of several tenants); ``None`` for a miss looked for in every tenant."""
        events = build_run("run-a", 3, tenant="acme")
        store.append(events[:1])
        store.append(build_run("run-a", 1))  # the same run id in another tenant
        with pytest.raises(SequenceConflict) as gap:
            store.append([events[2]])
        with pytest.raises(DuplicateConflict) as seq:
            store.append(build_run("run-a", 1, tenant="acme"))
        clash = new_event(
            run_id="run-b",
            seq=0,
            type=EventType.RUN_STARTED.value,
            actor="agent",
            payload={"input": "x"},
            prev_hash=None,
            event_id=events[0].event_id,
            tenant="acme",
        )
        with pytest.raises(DuplicateConflict) as event_id:
            store.append([clash])
        with pytest.raises(RunNotFound) as missing:
            store.run_info("run-z", tenant="acme")
        with pytest.raises(RunNotFound) as anywhere:
            store.run_info("run-z")
        found = [info.value.tenant for info in (gap, seq, event_id, missing, anywhere)]
        assert found == ["acme", "acme", "acme", "acme", None]

    def test_a_refused_batch_reports_its_first_refused_event(self, store: Store) -> None:
        """Whatever an engine checks first, a refused batch reports the event the one-by-one
        check refuses first (a stored seq, the run's head, then its event id), in the batch's
        order across runs and tenants; nothing of the batch is stored."""
        stored = build_run("run-a", 2)
        store.append(stored)

        def started(run_id: str, *, event_id: str | None = None, tenant: str = "default") -> Event:
            return new_event(
                run_id=run_id,
                seq=0,
                type=EventType.RUN_STARTED.value,
                actor="agent",
                payload={"input": run_id},
                prev_hash=None,
                event_id=event_id,
                tenant=tenant,
            )

        gap = build_run("run-c", 2)[1]
        other_gap = build_run("run-e", 2, tenant="t2")[1]
        twin = started("run-g")
        cases: list[tuple[list[Event], type[TachographError], str]] = [
            # an event id stored elsewhere, then a gap: the id
            ([started("run-b", event_id=stored[0].event_id), gap], DuplicateConflict, "run-b"),
            # a gap of the second tenant between the first tenant's good event and its gap
            ([started("run-d"), other_gap, gap], SequenceConflict, "run-e"),
            # two ids stored elsewhere: the first in the batch, whatever their order as ids
            (
                [
                    started("run-x", event_id=stored[1].event_id),
                    started("run-y", event_id=stored[0].event_id),
                ],
                DuplicateConflict,
                "run-x",
            ),
            # an id used twice in the batch: the second use
            ([twin, started("run-h", event_id=twin.event_id)], DuplicateConflict, "run-h"),
        ]
        for batch, kind, refused in cases:
            with pytest.raises(TachographError) as info:
                store.append(batch)
            assert type(info.value) is kind
            assert info.value.run_id == refused
            assert info.value.seq == next(e.seq for e in batch if e.run_id == refused)
            assert store.count_events() == 2
        with pytest.raises(DuplicateConflict, match="already stored at 'run-g' seq 0"):
            store.append([twin, started("run-h", event_id=twin.event_id)])

    # -- queries ----------------------------------------------------------------------------

    def _four_runs(self, store: Store) -> dict[str, list[Event]]:
        plan = [
            ("r1", "acme", "billing", "ok", 4, 100),
            ("r2", "acme", "support", "error", 3, 200),
            ("r3", "globex", "billing", None, 2, 300),
            ("r4", "default", "billing", "aborted", 5, 400),
        ]
        runs: dict[str, list[Event]] = {}
        for run_id, tenant, actor, status, length, base in plan:
            events = build_run(
                run_id,
                length,
                tenant=tenant,
                actor=actor,
                status=status,
                ts=_seconds_after(base),
            )
            store.append(events)
            runs[run_id] = events
        return runs

    def test_runs_lists_newest_first_with_counts(self, store: Store) -> None:
        runs = self._four_runs(store)
        infos = store.runs()
        assert _ids(infos) == ["r4", "r3", "r2", "r1"]
        by_id = {info.run_id: info for info in infos}
        for run_id, events in runs.items():
            info = by_id[run_id]
            assert info.events == len(events)
            assert info.head_hash == events[-1].hash
            assert info.started_at == events[0].ts
            assert info.last_at == events[-1].ts
            assert info.tenant == events[0].tenant
            assert info.actor == events[0].actor
            assert store.run_info(run_id) == info
        assert [by_id[r].status for r in ("r1", "r2", "r3", "r4")] == [
            "ok",
            "error",
            None,
            "aborted",
        ]

    def test_runs_filters(self, store: Store) -> None:
        self._four_runs(store)
        assert _ids(store.runs(actor="billing")) == ["r4", "r3", "r1"]
        assert _ids(store.runs(tenant="acme")) == ["r2", "r1"]
        assert _ids(store.runs(actor="billing", tenant="acme")) == ["r1"]
        assert _ids(store.runs(status="ok")) == ["r1"]
        assert _ids(store.runs(status="error")) == ["r2"]
        assert _ids(store.runs(status="aborted")) == ["r4"]
        assert _ids(store.runs(status="unfinished")) == ["r3"]
        assert _ids(store.runs(since=fixed_ts(200), until=fixed_ts(400))) == ["r3", "r2"]
        assert _ids(store.runs(since=fixed_ts(201))) == ["r4", "r3"]
        assert _ids(store.runs(until=fixed_ts(200))) == ["r1"]
        assert _ids(store.runs(limit=2)) == ["r4", "r3"]
        assert store.runs(actor="nobody") == []
        assert _ids(store.runs(prefix="r")) == ["r4", "r3", "r2", "r1"]
        assert _ids(store.runs(prefix="r2")) == ["r2"]
        assert _ids(store.runs(prefix="r", tenant="acme", limit=1)) == ["r2"]
        assert store.runs(prefix="r5") == []
        assert store.runs(prefix="r11") == []
        assert _ids(store.runs(prefix="")) == ["r4", "r3", "r2", "r1"]

    def test_a_prefix_is_compared_as_text_not_as_a_pattern(self, store: Store) -> None:
        """``runs(prefix=...)`` is the runs whose id begins with those characters: no
        wildcard of SQL's LIKE or GLOB, no case folding; a prefix holding characters no run
        id may hold (``%``, ``*``, a letter beyond ASCII, the last code point) begins none."""
        ids = ["ab.c", "abxc", "ab_c", "ab:c", "AB_c", "ab", "ab-z", "ac", "b"]
        for run_id in ids:
            store.append(build_run(run_id, 1))
        cases = [
            "ab_", "ab.", "AB", "ab", "a", "abx", "x", "ab%", "a%", "ab*", "a_", "a.",
            "ab\u00e9", "a\U0010ffff", "\U0010ffff",
        ]  # fmt: skip
        for prefix in cases:
            expected = sorted(i for i in ids if i.startswith(prefix))
            assert sorted(_ids(store.runs(prefix=prefix))) == expected, prefix

    def test_a_missing_run_is_not_found_with_close_matches(self, store: Store) -> None:
        for run_id in ("refund-0042", "refund-0043", "unrelated"):
            store.append(build_run(run_id, 1))
        with pytest.raises(RunNotFound) as info:
            store.run_info("refund-004")
        err = info.value
        assert err.run_id == "refund-004"
        assert set(err.suggestions) >= {"refund-0042", "refund-0043"}
        assert "unrelated" not in err.suggestions
        assert "refund-0042" in str(err)
        with pytest.raises(RunNotFound) as typo:
            list(store.read("refnud-0042"))
        assert "refund-0042" in typo.value.suggestions
        # naming the tenant must not turn a missing run into an empty, verified one
        with pytest.raises(RunNotFound):
            store.verify("refund-004", tenant="default")
        with pytest.raises(RunNotFound):
            list(store.read("refund-0042", tenant="other-tenant"))

    def test_close_matches_are_of_the_tenant_looked_in(self, store: Store) -> None:
        store.append(build_run("refund-0042", 1, tenant="globex"))
        store.append(build_run("refund-0043", 1, tenant="acme"))
        with pytest.raises(RunNotFound) as inside:
            store.run_info("refund-004", tenant="acme")
        assert inside.value.suggestions == ["refund-0043"]
        assert "in tenant 'acme' of" in str(inside.value)
        with pytest.raises(RunNotFound) as anywhere:
            store.run_info("refund-004")
        assert anywhere.value.suggestions == ["refund-0042", "refund-0043"]
        # a run of another tenant is named with its tenant, not offered as a match
        with pytest.raises(RunNotFound) as there:
            store.run_info("refund-0042", tenant="acme")
        assert (there.value.suggestions, list(there.value.tenants)) == ([], ["globex"])
        # what the errors offer, asked directly
        assert store.close_matches("refund-004", tenant="acme") == ["refund-0043"]
        assert store.close_matches("refund-004") == ["refund-0042", "refund-0043"]
        assert store.close_matches("zzz", tenant="globex") == []

    def test_the_ids_an_unknown_one_begins_come_in_code_point_order(self, store: Store) -> None:
        """Whatever order the runs were recorded in: the same five on every engine."""
        store.append([e for i in range(9, -1, -1) for e in build_run(f"refund-{i}", 1)])
        with pytest.raises(RunNotFound) as info:
            store.run_info("refund-")
        assert info.value.suggestions == [f"refund-{i}" for i in range(5)]

    def test_close_matches_come_from_the_hundred_ids_on_each_side(self, store: Store) -> None:
        """Similar spellings are looked for among the 100 ids on each side of the unknown one
        in sorted order (``store.base.NEIGHBOURS``), so that a store answers from two ranges of
        an index whatever its size: one farther away is not offered, however similar."""
        ids = ["m-target", *(f"n-{i:04d}" for i in range(150))]
        store.append([e for run_id in ids for e in build_run(run_id, 1)])
        with pytest.raises(RunNotFound) as far:
            store.run_info("o-target")  # 150 ids sort between it and m-target
        assert far.value.suggestions == []
        with pytest.raises(RunNotFound) as near:
            store.run_info("m-targex")
        assert near.value.suggestions == ["m-target"]
        with pytest.raises(RunNotFound) as typo:
            store.run_info("n-014x")
        assert len(typo.value.suggestions) == 5
        assert all(m.startswith("n-014") for m in typo.value.suggestions)

    # -- verification -------------------------------------------------------------------------

    def test_verify_a_stored_run(self, store: Store) -> None:
        events = build_run("run-a", 5, status="ok")
        store.append(events)
        report = verify_stored(store, "run-a")
        assert isinstance(report, VerifyReport)
        assert report.ok, report.render()
        assert (report.run_id, report.tenant, report.events) == ("run-a", "default", 5)
        assert report.head == events[-1].hash
        assert report.erased == ()
        assert not report.sealed

    def test_verify_all_streams_every_run_with_progress(self, store: Store) -> None:
        lengths = {"long": 2500, "short": 3, "single": 1}
        for run_id, length in lengths.items():
            events = build_run(run_id, length, tenant="t-" + run_id)
            for start in range(0, length, 1000):
                store.append(events[start : start + 1000])
        ticks: list[int] = []
        reports = list(verify_all(store, progress=ticks.append))
        assert sorted((r.run_id, r.events, r.ok) for r in reports) == sorted(
            (run_id, length, True) for run_id, length in lengths.items()
        )
        assert sum(ticks) == sum(lengths.values())
        assert max(ticks) <= 1000  # reported as it goes, not once at the end
        only = list(verify_all(store, tenant="t-short"))
        assert [(r.run_id, r.events) for r in store.verify_all(tenant="t-short")] == [("short", 3)]
        assert [(r.run_id, r.events) for r in only] == [("short", 3)]

    def test_run_keys_and_verify_all_list_runs_in_tenant_and_run_id_order(
        self, store: Store
    ) -> None:
        """Whatever the order of their appends (or the engine's storage), every engine lists
        its runs, and ``verify_all`` reports them, in ``(tenant, run_id)`` order, code point
        by code point (not a locale's order, which would put ``R-1`` after ``r-10``, or
        ``r:3`` after ``r-9``): two verifications of one store, or of a store and its copy in
        another engine, list their runs alike."""
        keys = [
            (tenant, run_id)
            for tenant in ("t-b", "t-a", "T-c", "t_a")
            for run_id in ("r-10", "r-9", "R-1", "r.2", "r:3", "r_4", "r-z", "a-b")
        ]
        shuffled = list(keys)
        random.Random(20).shuffle(shuffled)
        for tenant, run_id in shuffled:
            store.append(build_run(run_id, 2, tenant=tenant))
        expected = sorted(keys)
        assert store.run_keys() == expected
        assert [(r.tenant, r.run_id) for r in verify_all(store)] == expected

    def test_read_rows_streams_the_stored_rows(self, store: Store) -> None:
        events = build_run("run-a", 5, tenant="acme")
        store.append(events[:2])
        store.append(events[2:])
        rows = list(store.read_rows("run-a"))
        assert all(type(row) is StoredRow for row in rows)
        expected = [StoredRow.of(e) for e in events]
        # the bytes are the engine's to keep (any key order); everything else is as appended
        assert [r._replace(payload_bytes=None) for r in rows] == [
            r._replace(payload_bytes=None) for r in expected
        ]
        for row, event in zip(rows, events, strict=True):
            assert isinstance(row.payload_bytes, bytes)
            assert orjson.loads(row.payload_bytes) == event.payload
        assert list(store.read_rows("run-a", tenant="acme", from_seq=3)) == rows[3:]
        assert list(store.read_rows("run-a", from_seq=5)) == []
        with pytest.raises(RunNotFound):
            list(store.read_rows("run-a", tenant="default"))
        with pytest.raises(RunNotFound):
            list(store.read_rows("run-b"))

    def test_rows_containing_is_read_rows_filtered_by_the_payload_bytes(self, store: Store) -> None:
        def payload(seq: int) -> dict[str, object]:
            if seq % 3 == 1:
                return {"n": seq, "doc": {"$blob": f"sha256:{seq:064x}", "size": seq}}
            return {"n": seq, "text": "caf\u00e9" if seq % 5 == 2 else "plain"}

        events = build_run("run-a", 30, tenant="acme", payload=payload)
        store.append(events + build_run("run-a", 7, tenant="other", payload=payload))
        for needles in ((b"$blob",), (b"$blob", b"caf"), (b"absent",), ()):
            got = list(store.rows_containing("run-a", needles, tenant="acme"))
            want = [
                r
                for r in store.read_rows("run-a", tenant="acme")
                if type(r.payload_bytes) is bytes and any(n in r.payload_bytes for n in needles)
            ]
            assert got == want, needles
        assert [r.seq for r in store.rows_containing("run-a", (b"$blob",), tenant="acme")] == [
            s for s in range(1, 29) if s % 3 == 1
        ]
        other = list(store.rows_containing("run-a", (b"$blob",), tenant="other"))
        assert [(r.tenant, r.seq) for r in other] == [("other", 1), ("other", 4)]
        with pytest.raises(StoreError) as info:
            list(store.rows_containing("run-a", (b"$blob",)))  # ambiguous without a tenant
        assert not isinstance(info.value, RunNotFound)
        with pytest.raises(RunNotFound):
            list(store.rows_containing("run-b", (b"$blob",), tenant="acme"))

    def test_a_read_during_appends_has_no_gap_and_no_repeat(self, store: Store) -> None:
        events = build_run("run-a", 6)
        store.append(events[:3])
        reading = store.read_rows("run-a")
        first = next(reading)
        store.append(events[3:])
        seqs = [first.seq, *(r.seq for r in reading)]
        # what was stored when the read began, and perhaps what came after: never a hole
        assert seqs in (list(range(3)), list(range(6))), seqs
        assert [r.seq for r in store.read_rows("run-a")] == list(range(6))

    def test_verify_stored_holds_the_chain_against_the_summary(self, store: Store) -> None:
        events = build_run("run-a", 6, status="ok")
        for start in range(0, 6, 2):
            store.append(events[start : start + 2])
        report = verify_stored(store, "run-a")
        assert report.ok, report.render()
        assert (report.events, report.head, report.source) == (6, events[-1].hash, store.url)
        assert store.verify("run-a") == report  # the convenience is the same check
        assert [r.events for r in verify_all(store)] == [6]
        with pytest.raises(RunNotFound):
            verify_stored(store, "run-b")

    def test_rows_of_another_run_do_not_verify_against_a_summary(self, store: Store) -> None:
        store.append(build_run("run-a", 3) + build_run("run-b", 3))
        report = verify_run(store.read_rows("run-b"), store.run_info("run-a"))
        assert report.first_failure is not None
        assert (report.first_failure.seq, report.first_failure.check) == (0, Check.SEQUENCE)

    # -- interchange ----------------------------------------------------------------------

    def test_export_then_import_elsewhere_reproduces_the_run(
        self, store: Store, tmp_path: Path
    ) -> None:
        events = build_run("run-a", 12, status="ok")
        store.append(events)
        exported = io.BytesIO()
        assert export_run(store, "run-a", exported) == 12
        elsewhere_dir = tmp_path / "elsewhere"
        elsewhere_dir.mkdir()
        elsewhere = self.make_store(elsewhere_dir)
        try:
            report = import_jsonl(elsewhere, io.BytesIO(exported.getvalue()))
            assert (report.events, report.written, report.duplicates) == (12, 12, 0)
            assert list(elsewhere.read("run-a")) == events
            again = io.BytesIO()
            export_run(elsewhere, "run-a", again)
            assert again.getvalue() == exported.getvalue()
            report = import_jsonl(elsewhere, io.BytesIO(exported.getvalue()))
            assert (report.written, report.duplicates) == (0, 12)
        finally:
            elsewhere.close()

    # -- durability and memory --------------------------------------------------------------

    def test_what_was_appended_is_there_after_reopening(self, tmp_path: Path) -> None:
        events = build_run("run-a", 5)
        first = self.make_store(tmp_path)
        url = first.url
        try:
            first.append(events)
        finally:
            first.close()
        openers: list[Callable[[], Store]] = [
            lambda: self.make_store(tmp_path),
            lambda: open_store(url, create=True),
        ]
        for again in openers:
            second = again()
            try:
                if self.persistent:
                    assert list(second.read("run-a")) == events
                    assert verify_stored(second, "run-a").ok
                else:
                    assert second.count_events() == 0
                    with pytest.raises(RunNotFound):
                        second.run_info("run-a")
            finally:
                second.close()

    def test_a_closed_store_refuses_work_with_a_store_error(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        events = build_run("run-a", 2)
        store.append(events[:1])
        store.close()
        store.close()  # twice is harmless
        for work in (
            lambda: store.append(events[1:]),
            lambda: list(store.read_rows("run-a")),
            lambda: store.run_info("run-a"),
            store.runs,
            store.count_events,
        ):
            with pytest.raises(StoreError) as info:
                work()
            assert type(info.value).__module__ == "tachograph.errors", repr(info.value)

    def _fill(self, store: Store, run_id: str, tag: str, length: int) -> None:
        """Append a long run quickly: chained by seq and prev_hash, hashes not recomputed.

        Stores do not hash (the core does), so this is a valid append for any engine; the run
        just does not verify, which the memory test does not need. ``tag`` (one Crockford
        character) keeps event ids unique across runs.
        """
        t = build_run(run_id, 1)[0]
        prev: str | None = None
        batch: list[Event] = []
        for seq in range(length):
            digest = f"sha256:{seq:064x}"
            batch.append(
                Event(
                    t.v,
                    t.tenant,
                    t.run_id,
                    seq,
                    f"01J9Z8Q2M{tag}{seq:016d}",
                    t.ts,
                    EventType.DECISION.value if seq else EventType.RUN_STARTED.value,
                    t.actor,
                    None,
                    None,
                    None,
                    None,
                    None,
                    t.payload_digest,
                    prev,
                    digest,
                    None,
                    t.salt,
                    b'{"n":%d}' % seq,
                )
            )
            prev = digest
            if len(batch) == 10_000:
                store.append(batch)
                batch = []
        store.append(batch)

    @staticmethod
    def _peak(consume: Callable[[], int]) -> tuple[int, int]:
        # tracemalloc counts every thread: writers of other stores in this process (sealing
        # a quiet run, say) must not be measured as this read
        from ..capture.recorder import close_all_writers

        close_all_writers()
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            count = consume()
            return count, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    def test_reads_stream_in_constant_memory(self, store: Store) -> None:
        big, small = self.stream_events, self.stream_events // 10
        self._fill(store, "big", "B", big)
        self._fill(store, "small", "S", small)

        def reader(run_id: str) -> Callable[[], int]:
            return lambda: sum(1 for _ in store.read(run_id, decode=False))

        small_count, small_peak = self._peak(reader("small"))
        big_count, big_peak = self._peak(reader("big"))
        assert (small_count, big_count) == (small, big)
        # Ten times the events must not take (anywhere near) ten times the memory.
        assert big_peak < 2 * small_peak + 512 * 1024, (small_peak, big_peak)

    # -- the data lifecycle: erasure, deletion, the store audit, data subjects ------------

    @staticmethod
    def _entry(action: str = "erase", **detail: object) -> AuditEntry:
        return AuditEntry(action=action, actor="conformance", detail={"reason": "test", **detail})

    def test_erase_nulls_payload_and_salt_and_records_it(self, store: Store) -> None:
        events = build_run("run-a", 5, status="ok")
        store.append(events)
        assert store.erase("default", "run-a", [1, 3], audit=self._entry()) == 2
        read = store.events("run-a")
        assert [e.seq for e in read if e.erased] == [1, 3]
        assert read[2] == events[2]
        assert [e.hash for e in read] == [e.hash for e in events]  # envelopes untouched
        report = store.verify("run-a")
        assert report.ok
        assert report.erased == (1, 3)
        (record,) = list(store.read_audit())
        assert (record.seq, record.action, record.prev_hash) == (0, "erase", None)
        assert record.detail == {"reason": "test", "run_id": "run-a", "seqs": [1, 3]}
        assert record.hash == record.recomputed_hash()

    def test_erase_is_idempotent_and_ignores_unknown_seqs(self, store: Store) -> None:
        store.append(build_run("run-a", 4))
        assert store.erase("default", "run-a", [2], audit=self._entry()) == 1
        assert store.erase("default", "run-a", [2, 40], audit=self._entry()) == 0
        assert store.erase("default", "run-a", [], audit=self._entry()) == 0
        assert len(list(store.read_audit())) == 1  # nothing erased, nothing recorded

    def test_erase_stays_inside_its_tenant(self, store: Store) -> None:
        store.append(build_run("run-a", 3, tenant="t1"))
        store.append(build_run("run-a", 3, tenant="t2"))
        assert store.erase("t1", "run-a", [1], audit=self._entry()) == 1
        assert store.verify("run-a", tenant="t2").erased == ()
        assert store.verify("run-a", tenant="t1").erased == (1,)

    def test_the_audit_is_a_hash_chain(self, store: Store) -> None:
        first = store.append_audit(self._entry("read", purpose="debug"))
        second = store.append_audit(AuditEntry(action="read", actor="x", tenant="t9"))
        assert (first.seq, second.seq) == (0, 1)
        assert second.prev_hash == first.hash
        assert list(store.read_audit()) == [first, second]
        assert list(store.read_audit(from_seq=1)) == [second]
        assert second.tenant == "t9"

    def test_the_change_token_moves_with_every_write_and_with_nothing_else(
        self, store: Store
    ) -> None:
        """``change_token``: ``None`` (nothing kept), or a value that changes with every
        write but the record of a read, so that what is derived from the store (a seal-log
        audit) is kept only while it holds."""
        if store.change_token() is None:
            return
        store.append(build_run("run-a", 4))
        tokens = [store.change_token()]

        def moved() -> bool:
            tokens.append(store.change_token())
            return tokens[-1] != tokens[-2]

        list(store.read("run-a"))
        store.run_info("run-a")
        store.append_audit(self._entry("read", purpose="debug"))
        assert not moved()  # reads, and the record of a read
        store.append(build_run("run-b", 2))
        assert moved()
        assert store.erase("default", "run-a", [1], audit=self._entry()) == 1
        assert moved()
        store.append_audit(self._entry("retention.note"))
        assert moved()  # a record that is not of a read
        assert store.delete_run("default", "run-b", audit=self._entry("retention.delete")) == 2
        assert moved()

    def test_delete_run_removes_it_and_keeps_its_id_taken(self, store: Store) -> None:
        store.append(build_run("run-a", 4, status="ok"))
        store.append(build_run("run-b", 2))
        store.link_subjects("default", "run-a", [(1, "p")])
        assert store.delete_run("default", "run-a", audit=self._entry("retention.delete")) == 4
        assert _ids(store.runs()) == ["run-b"]
        assert store.count_events() == 2
        assert store.subject_events("default", "p") == []
        with pytest.raises(RunNotFound):
            store.run_info("run-a")
        with pytest.raises(AppendRefused):
            store.append(build_run("run-a", 1))
        assert store.delete_run("default", "run-a", audit=self._entry("retention.delete")) == 0
        (record,) = list(store.read_audit())
        assert record.detail["events"] == 4
        assert list(store.audit_of("retention.delete")) == [record]
        assert list(store.audit_of("retention.delete", tenant="default")) == [record]
        assert list(store.audit_of("retention.delete", tenant="other")) == []
        assert list(store.audit_of("erase")) == []

    def test_a_deleted_run_is_refused_as_deleted_wherever_a_batch_meets_it(
        self, store: Store
    ) -> None:
        """Appending to a run retention deleted is refused as such, naming that run: its next
        event (not a gap "expected at seq 0", which would send its writer to start it again),
        a new first event behind another run's good one, or ahead of another run's gap; and
        nothing of the batch is stored."""
        gone = build_run("run-r", 4)
        other = build_run("run-a", 6)
        store.append(gone[:3])
        store.append(other[:1])
        store.delete_run("default", "run-r", audit=self._entry("retention.delete"))
        again = build_run("run-r", 1)
        for batch in ([gone[3]], [other[1], *again], [*again, other[5]]):
            with pytest.raises(AppendRefused, match="deleted by retention") as info:
                store.append(batch)
            assert (info.value.run_id, info.value.tenant) == ("run-r", "default")
            assert store.count_events() == 1
            assert store.head("run-a") == (0, other[0].hash)

    def test_audit_of_is_the_audit_filtered_by_action_and_tenant(self, store: Store) -> None:
        store.append(build_run("run-a", 3))
        for action in ("read", "erase", "read", "retention.note", "read"):
            store.append_audit(self._entry(action))
        everything = list(store.read_audit())
        for action in ("read", "erase", "retention.note", "retention.delete"):
            wanted = [r for r in everything if r.action == action]
            assert list(store.audit_of(action)) == wanted
            assert list(store.audit_of(action, tenant="default")) == wanted
            assert list(store.audit_of(action, tenant="elsewhere")) == []
        assert [r.seq for r in store.audit_of("read")] == [0, 2, 4]
        assert [r.ok for r in store.verify_all()] == [True]

    def test_erasing_a_subject_removes_its_links_with_the_same_record(self, store: Store) -> None:
        """``erase(..., unlink=id)`` drops that subject's links to the seqs in the erasure's
        transaction and says how many in its record; links left beside payloads already
        erased (an erasure of an older version) go with a record of their own; with nothing
        left, nothing is recorded."""
        store.append(build_run("run-a", 4))
        store.append(build_run("run-b", 2))
        store.link_subjects("default", "run-a", [(1, "p1"), (2, "p1"), (3, "p1"), (1, "p2")])
        store.link_subjects("default", "run-b", [(1, "p1")])
        store.link_subjects("t2", "run-a", [(1, "p1")])
        assert store.erase("default", "run-a", [0, 1, 2], audit=self._entry(), unlink="p1") == 3
        assert store.subject_events("default", "p1") == [("run-a", 3), ("run-b", 1)]
        assert store.subject_events("default", "p2") == [("run-a", 1)]  # another subject's
        assert store.subject_events("t2", "p1") == [("run-a", 1)]  # another tenant's
        (first,) = list(store.audit_of("erase"))
        assert (first.detail["seqs"], first.detail["unlinked"]) == ([0, 1, 2], 2)
        store.link_subjects("default", "run-a", [(2, "p1")])  # beside an erased payload
        assert store.erase("default", "run-a", [2, 3], audit=self._entry(), unlink="p1") == 1
        assert store.erase("default", "run-a", [2], audit=self._entry(), unlink="p1") == 0
        store.link_subjects("default", "run-a", [(1, "p1")])
        assert store.erase("default", "run-a", [1], audit=self._entry(), unlink="p1") == 0
        records = list(store.audit_of("erase"))
        assert [(r.detail["seqs"], r.detail["unlinked"]) for r in records] == [
            ([0, 1, 2], 2),
            ([3], 2),
            ([], 1),
        ]
        assert store.subject_events("default", "p1") == [("run-b", 1)]
        assert store.erase("default", "run-a", [0, 1, 2, 3], audit=self._entry(), unlink="p1") == 0
        assert len(list(store.audit_of("erase"))) == 3  # nothing left: nothing recorded
        assert store.erase("default", "run-a", [1], audit=self._entry()) == 0
        assert store.subject_events("default", "p2") == [("run-a", 1)]  # no unlink: kept
        # the forms one id is linked under, in one transaction and one record
        store.link_subjects("default", "run-b", [(0, "p1"), (0, "p1-token")])
        forms = ["p1", "p1-token"]
        assert store.erase("default", "run-b", [0, 1], audit=self._entry(), unlink=forms) == 2
        last = list(store.audit_of("erase"))[-1]
        assert (last.detail["seqs"], last.detail["unlinked"]) == ([0, 1], 3)
        assert store.subject_events("default", "p1") == []
        assert store.subject_events("default", "p1-token") == []
        assert [r.ok for r in store.verify_all()] == [True, True]

    def test_subjects_link_events_across_runs(self, store: Store) -> None:
        store.append(build_run("run-a", 3))
        store.append(build_run("run-b", 3))
        assert store.link_subjects("default", "run-b", [(2, "p1"), (1, "p1")]) == 2
        assert store.link_subjects("default", "run-a", [(1, "p1"), (1, "p2")]) == 2
        assert store.link_subjects("default", "run-a", [(1, "p1")]) == 0
        assert store.subject_events("default", "p1") == [("run-a", 1), ("run-b", 1), ("run-b", 2)]
        assert store.subject_events("other", "p1") == []
