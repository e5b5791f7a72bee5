"""``Store.rows_containing``: the rows whose stored payload bytes hold a marker.

SQLite filters in the database (``instr`` over each BLOB); every other engine, and a view
through a purpose, filters the rows it reads. Both must give exactly the rows of
``read_rows`` that hold the marker, page boundaries, erased payloads and tampered bodies
included, and a view through a purpose must not see past what the purpose may read.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tachograph.errors import RunNotFound
from tachograph.lifecycle import erase, list_audit
from tachograph.lifecycle.purpose import scoped
from tachograph.store import MemoryStore, SQLiteStore, Store
from tachograph.testing import build_run

NEEDLE = (b"$blob",)
N = 4_500  # more than two of SQLite's read pages (2,000 rows)


def _payload(seq: int) -> dict[str, object]:
    if seq % 7 == 3:
        return {"n": seq, "doc": {"$blob": f"sha256:{seq:064x}", "size": seq}}
    if seq % 11 == 5:
        return {"n": seq, "note": "names $blob in a string"}
    return {"n": seq, "note": "nothing to see"}


def _expected(
    store: Store, run_id: str, needles: tuple[bytes, ...] = NEEDLE, tenant: str = "default"
) -> list[object]:
    return [
        r
        for r in store.read_rows(run_id, tenant=tenant)
        if type(r.payload_bytes) is bytes and any(n in r.payload_bytes for n in needles)
    ]


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    path = tmp_path / "rows.db"
    with SQLiteStore(path) as store:
        store.append(build_run("long", N, payload=_payload))
        store.append(build_run("plain", 50))
        erase(store, "long", reason="test", seqs=[3, 10])  # erased: no bytes to hold it
        # the same run id under another tenant, with the marker elsewhere
        store.append(build_run("long", 40, tenant="other", payload=lambda q: _payload(q + 1)))
    db = sqlite3.connect(path, isolation_level=None)
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'"):
        db.execute(f"DROP TRIGGER {name}")
    # a tampered body stored as TEXT that holds the marker: not a stored payload's bytes
    db.execute(
        "UPDATE payloads SET body = CAST(body AS TEXT) WHERE id = "
        "(SELECT id FROM events WHERE tenant='default' AND run_id='long' AND seq=17)"
    )
    db.close()
    return path


def test_sqlite_filters_as_the_contract_reads(filled: Path) -> None:
    with SQLiteStore(filled) as store:
        got = list(store.rows_containing("long", NEEDLE, tenant="default"))
        base = Store.rows_containing(store, "long", NEEDLE, tenant="default")
        assert got == list(base)  # the contract's own reading
        assert got == _expected(store, "long")
        seqs = [r.seq for r in got]
        assert seqs == sorted(seqs)
        assert not {3, 10} & set(seqs)  # erased
        assert 17 not in seqs  # a TEXT body
        assert {24, 5} <= set(seqs)  # a reference, and the marker inside a string
        assert max(seqs) > 4_000  # late rows of a long run
        # a marker in most rows: the matches themselves take more than one page
        many = list(store.rows_containing("long", (b'"note"',), tenant="default"))
        assert len(many) > 2_000
        assert many == _expected(store, "long", (b'"note"',))
        # any of several markers, each one's rows in seq order once
        both = list(store.rows_containing("long", (b'"note"', b"$blob"), tenant="default"))
        assert both == _expected(store, "long", (b'"note"', b"$blob"))
        assert list(store.rows_containing("long", (), tenant="default")) == []
        assert list(store.rows_containing("plain", NEEDLE)) == []
        assert list(store.rows_containing("long", (b"no such marker",), tenant="default")) == []
        # a tenant named: that tenant's run, not the other's
        other = list(store.rows_containing("long", NEEDLE, tenant="other"))
        assert other == _expected(store, "long", tenant="other")
        assert [r.seq for r in other] == [
            q for q in range(1, 39) if (q + 1) % 7 == 3 or (q + 1) % 11 == 5
        ]
        assert {r.tenant for r in other} == {"other"}
        with pytest.raises(RunNotFound):
            list(store.rows_containing("missing", NEEDLE))


def test_the_memory_store_filters_what_it_reads() -> None:
    store = MemoryStore()
    store.append(build_run("long", 300, payload=_payload))
    got = list(store.rows_containing("long", NEEDLE))
    assert [r.seq for r in got] == [s for s in range(300) if s % 7 == 3 or s % 11 == 5]
    assert got == _expected(store, "long")


def test_a_purpose_view_does_not_see_past_its_purpose(filled: Path) -> None:
    with SQLiteStore(filled) as store:
        # the metrics purpose reads envelopes only: every payload is withheld from it
        metrics = scoped(store, purpose="metrics")
        assert list(metrics.rows_containing("long", NEEDLE, tenant="default")) == []
        reads = len(list_audit(store, action="read", run_id="long"))
        assert reads >= 1  # the view's read was recorded
        debug = scoped(store, purpose="debug")
        assert [r.seq for r in debug.rows_containing("long", NEEDLE, tenant="default")] == [
            r.seq for r in _expected(store, "long")
        ]
        assert len(list_audit(store, action="read", run_id="long")) == reads + 1
