"""Tampering with the SQLite file itself, as an attacker with write access would.

The attacker drops the append-only triggers first, edits rows with a raw sqlite3 connection,
and the verifier must name the seq (and the check) where the chain breaks.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tachograph.errors import RunNotFound
from tachograph.record.event import Event, hash_envelope
from tachograph.record.jsonl import import_jsonl
from tachograph.record.verify import Check
from tachograph.store import SQLiteStore
from tachograph.testing import build_run

RUN = "run_2026_10_15_0042"
TENANT = "acme-eu"
RUN_KEY = (TENANT, RUN)
BYSTANDER_KEY = ("default", "bystander")
T = 5  # the event the attacker goes after, in the middle of the 11-event run
OTHER_DIGEST = "sha256:" + "ab" * 32


@dataclass
class Scene:
    """The store file, the events as they were recorded, and a raw connection to the file."""

    path: Path
    run: list[Event]
    bystander: list[Event]
    db: sqlite3.Connection

    def row(self, seq: int, tenant: str = TENANT, run_id: str = RUN) -> int:
        found = self.db.execute(
            "SELECT id FROM events WHERE tenant=? AND run_id=? AND seq=?", (tenant, run_id, seq)
        ).fetchone()
        assert found is not None, (tenant, run_id, seq)
        return int(found[0])

    def set(self, seq: int, /, **columns: object) -> None:
        assignments = ", ".join(f"{name}=?" for name in columns)
        self.db.execute(
            f"UPDATE events SET {assignments} WHERE id=?", (*columns.values(), self.row(seq))
        )

    def set_payload(self, seq: int, /, **columns: object) -> None:
        assignments = ", ".join(f"{name}=?" for name in columns)
        self.db.execute(
            f"UPDATE payloads SET {assignments} WHERE id=?", (*columns.values(), self.row(seq))
        )

    def rehash(self, seq: int, /, **changes: object) -> None:
        """Change envelope fields of one event and store a hash that matches the new envelope."""
        forged = dataclasses.replace(self.run[seq], **changes)
        self.set(seq, **changes, hash=hash_envelope(forged.envelope_jcs()))

    def delete(self, seq: int) -> None:
        rowid = self.row(seq)
        self.db.execute("DELETE FROM payloads WHERE id=?", (rowid,))
        self.db.execute("DELETE FROM events WHERE id=?", (rowid,))

    def copy_as(self, seq: int, new_seq: int, event_id: str) -> None:
        rowid = self.row(seq)
        cur = self.db.execute(
            "INSERT INTO events (tenant, run_id, seq, event_id, ts, type, actor, trace_id, "
            "span_id, idempotency_key, model, seed, payload_digest, prev_hash, hash) "
            "SELECT tenant, run_id, ?, ?, ts, type, actor, trace_id, span_id, idempotency_key, "
            "model, seed, payload_digest, prev_hash, hash FROM events WHERE id=?",
            (new_seq, event_id, rowid),
        )
        self.db.execute(
            "INSERT INTO payloads (id, salt, body) SELECT ?, salt, body FROM payloads WHERE id=?",
            (cur.lastrowid, rowid),
        )


@pytest.fixture
def scene(tmp_path: Path, vectors_dir: Path) -> Iterator[Scene]:
    path = tmp_path / "store.db"
    store = SQLiteStore(path)
    import_jsonl(store, vectors_dir / "events" / "refund_run.jsonl")
    bystander = build_run("bystander", 4)
    store.append(bystander)
    run = store.events(RUN, tenant=TENANT)
    assert store.verify(RUN).ok
    store.close()
    db = sqlite3.connect(path, isolation_level=None)
    triggers = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'")]
    assert {
        "events_append_only_update",
        "events_append_only_delete",
        "payloads_erase_only",
        "payloads_no_delete",
    } <= set(triggers)
    for name in triggers:  # the attacker's first move
        db.execute(f"DROP TRIGGER {name}")
    try:
        yield Scene(path, run, bystander, db)
    finally:
        db.close()


Expect = dict[tuple[str, str], "tuple[int, Check] | None"]
Attack = Callable[[Scene], object]


def _swap(s: Scene, a: int, b: int) -> None:
    ra, rb = s.row(a), s.row(b)
    s.db.execute("UPDATE events SET seq=-1 WHERE id=?", (ra,))
    s.db.execute("UPDATE events SET seq=? WHERE id=?", (a, rb))
    s.db.execute("UPDATE events SET seq=? WHERE id=?", (b, ra))


def _renumber_after_delete(s: Scene, *, rehash: bool) -> None:
    s.delete(T)
    for seq in range(T + 1, len(s.run)):
        rowid = s.row(seq)
        changes: dict[str, object] = {"seq": seq - 1}
        if rehash:
            forged = dataclasses.replace(s.run[seq], seq=seq - 1)
            changes["hash"] = hash_envelope(forged.envelope_jcs())
        assignments = ", ".join(f"{k}=?" for k in changes)
        s.db.execute(f"UPDATE events SET {assignments} WHERE id=?", (*changes.values(), rowid))


def _move_to_bystander(s: Scene) -> None:
    s.db.execute(
        "UPDATE events SET tenant='default', run_id='bystander', seq=4 WHERE id=?", (s.row(T),)
    )


def _body_of(s: Scene, seq: int) -> bytes:
    body = s.db.execute("SELECT body FROM payloads WHERE id=?", (s.row(seq),)).fetchone()[0]
    assert isinstance(body, bytes)
    return body


def _p(attack: Attack, expect: Expect | None = None, *, id: str) -> object:
    default: Expect = {RUN_KEY: (T, Check.HASH), BYSTANDER_KEY: None}
    return pytest.param(attack, expect if expect is not None else default, id=id)


SEQ, HASH, LINK, PAYLOAD, FORMAT = (
    Check.SEQUENCE,
    Check.HASH,
    Check.LINK,
    Check.PAYLOAD,
    Check.FORMAT,
)

ATTACKS = [
    # every one of the 15 envelope columns the store keeps
    _p(
        lambda s: s.set(T, tenant="acme-us"),
        {RUN_KEY: (T, SEQ), ("acme-us", RUN): (0, SEQ), BYSTANDER_KEY: None},
        id="column-tenant",
    ),
    _p(
        lambda s: s.set(T, run_id="run_2026_10_15_0043"),
        {RUN_KEY: (T, SEQ), (TENANT, "run_2026_10_15_0043"): (0, SEQ), BYSTANDER_KEY: None},
        id="column-run_id",
    ),
    _p(lambda s: s.set(T, seq=50), {RUN_KEY: (T, SEQ), BYSTANDER_KEY: None}, id="column-seq"),
    _p(lambda s: s.set(T, event_id="01J9Z8Q2M4AAAAAAAAAAAAAAZ5"), id="column-event_id"),
    _p(lambda s: s.set(T, ts="2026-10-15T03:12:14.417556Z"), id="column-ts"),
    _p(lambda s: s.set(T, type="tool.completed"), id="column-type"),
    _p(lambda s: s.set(T, actor="mallory"), id="column-actor"),
    _p(lambda s: s.set(T, trace_id="f" * 32), id="column-trace_id"),
    _p(lambda s: s.set(T, span_id="0000000000002005"), id="column-span_id"),
    _p(lambda s: s.set(T, idempotency_key=f"{RUN}:issue_refund:A-9999"), id="column-idem-key"),
    _p(lambda s: s.set(T, idempotency_key=None), id="column-idem-key-null"),
    _p(lambda s: s.set(T, model="gpt-5.6-2026-09-30"), id="column-model"),
    _p(lambda s: s.set(T, seed=42), id="column-seed"),
    _p(lambda s: s.set(T, payload_digest=OTHER_DIGEST), id="column-payload_digest"),
    _p(lambda s: s.set(T, prev_hash=OTHER_DIGEST), id="column-prev_hash"),
    _p(lambda s: s.set(T, hash=OTHER_DIGEST), id="column-hash"),
    # payload and salt
    _p(
        lambda s: s.set_payload(T, body=_body_of(s, T).replace(b"2500", b"250000")),
        {RUN_KEY: (T, PAYLOAD), BYSTANDER_KEY: None},
        id="payload-body",
    ),
    _p(
        lambda s: s.set_payload(T, salt="00" * 16),
        {RUN_KEY: (T, PAYLOAD), BYSTANDER_KEY: None},
        id="salt",
    ),
    _p(
        lambda s: s.set_payload(T, salt=None),
        {RUN_KEY: (T, PAYLOAD), BYSTANDER_KEY: None},
        id="salt-only-erased",
    ),
    _p(
        lambda s: s.set_payload(T, body=None),
        {RUN_KEY: (T, PAYLOAD), BYSTANDER_KEY: None},
        id="body-only-erased",
    ),
    _p(
        lambda s: s.db.execute("DELETE FROM payloads WHERE id=?", (s.row(T),)),
        {RUN_KEY: (T, SEQ), BYSTANDER_KEY: None},
        id="payload-row-deleted",
    ),
    # whole events
    _p(lambda s: s.delete(T), {RUN_KEY: (T, SEQ), BYSTANDER_KEY: None}, id="middle-deleted"),
    _p(lambda s: _swap(s, T, T + 1), id="two-swapped"),
    _p(
        lambda s: s.copy_as(T, 11, "01J9Z8Q2M4AAAAAAAAAAAAAAZZ"),
        {RUN_KEY: (11, HASH), BYSTANDER_KEY: None},
        id="duplicated-as-next-seq",
    ),
    _p(
        _move_to_bystander,
        {RUN_KEY: (T, SEQ), BYSTANDER_KEY: (4, HASH)},
        id="moved-to-another-run",
    ),
    _p(
        lambda s: _renumber_after_delete(s, rehash=False),
        id="renumbered-after-delete",
    ),
    _p(
        lambda s: _renumber_after_delete(s, rehash=True),
        {RUN_KEY: (T, LINK), BYSTANDER_KEY: None},
        id="renumbered-and-rehashed",
    ),
    _p(
        lambda s: s.rehash(T, ts="2026-10-15T03:12:14.000000Z"),
        {RUN_KEY: (T + 1, LINK), BYSTANDER_KEY: None},
        id="edited-and-rehashed",
    ),
    _p(
        lambda s: s.db.execute("UPDATE events SET tenant='acme-us' WHERE run_id=?", (RUN,)),
        {RUN_KEY: (0, SEQ), ("acme-us", RUN): (0, HASH), BYSTANDER_KEY: None},
        id="whole-run-moved-to-another-tenant",
    ),
    # values no writer could have stored: reported as check 1, never raised
    _p(
        lambda s: s.rehash(10, ts="2026-10-15 03:12:19"),
        {RUN_KEY: (10, FORMAT), BYSTANDER_KEY: None},
        id="malformed-last-event-rehashed",
    ),
    _p(
        lambda s: s.set(T, seed=2**62),
        {RUN_KEY: (T, FORMAT), BYSTANDER_KEY: None},
        id="seed-out-of-range",
    ),
    _p(
        lambda s: s.set(T, actor=b"\xff"),
        {RUN_KEY: (T, FORMAT), BYSTANDER_KEY: None},
        id="actor-as-blob",
    ),
    _p(
        lambda s: s.db.execute(
            "UPDATE events SET actor=CAST(X'6dff' AS TEXT) WHERE id=?", (s.row(T),)
        ),
        {RUN_KEY: (T, FORMAT), BYSTANDER_KEY: None},
        id="actor-invalid-utf8",
    ),
    _p(
        lambda s: s.set(T, seq=5.5),
        {RUN_KEY: (T, FORMAT), BYSTANDER_KEY: None},
        id="seq-as-real",
    ),
    _p(
        lambda s: s.set_payload(T, salt="zz" * 16),
        {RUN_KEY: (T, FORMAT), BYSTANDER_KEY: None},
        id="salt-not-hex",
    ),
    _p(
        lambda s: s.set_payload(T, body=_body_of(s, T).decode()),
        {RUN_KEY: (T, FORMAT), BYSTANDER_KEY: None},
        id="body-as-text",
    ),
    _p(
        lambda s: s.set_payload(T, body=b'{"tool": NaN}'),
        {RUN_KEY: (T, PAYLOAD), BYSTANDER_KEY: None},
        id="body-not-json",
    ),
    # The chain alone cannot show these two; the run summary, written in the same transaction
    # as every append, does (SPEC: a store without signed checkpoints stays "unsealed").
    _p(
        lambda s: (s.delete(10), s.delete(9)),
        {RUN_KEY: (9, SEQ), BYSTANDER_KEY: None},
        id="tail-cut",
    ),
    _p(
        lambda s: s.rehash(10, ts="2026-10-15T03:12:19.999999Z"),
        {RUN_KEY: (10, SEQ), BYSTANDER_KEY: None},
        id="last-event-replaced-and-rehashed",
    ),
]


@pytest.mark.parametrize(("attack", "expect"), ATTACKS)
def test_tampering_is_detected_at_the_right_seq(
    scene: Scene, attack: Attack, expect: Expect
) -> None:
    attack(scene)
    scene.db.close()
    store = SQLiteStore(scene.path)
    try:
        reports = {(r.tenant, r.run_id): r for r in store.verify_all()}
        found = {
            key: (r.first_failure.seq, r.first_failure.check) if r.first_failure else None
            for key, r in reports.items()
        }
        assert found == expect, {k: r.render() for k, r in reports.items()}
        for (tenant, run_id), outcome in expect.items():
            try:
                single = store.verify(run_id, tenant=tenant)
            except RunNotFound:
                assert outcome is not None
                continue
            first = single.first_failure
            assert ((first.seq, first.check) if first else None) == outcome
            if outcome is not None:
                assert f"seq {outcome[0]}" in single.render()
                assert single.head is None
    finally:
        store.close()


def test_an_untouched_store_verifies(scene: Scene) -> None:
    scene.db.close()
    store = SQLiteStore(scene.path)
    try:
        assert {(r.tenant, r.run_id): r.ok for r in store.verify_all()} == {
            RUN_KEY: True,
            BYSTANDER_KEY: True,
        }
        assert store.integrity_check() == "ok"
    finally:
        store.close()


def test_stored_json_in_another_key_order_is_not_tampering(scene: Scene) -> None:
    # verification recomputes from values (SPEC section 4), not from the stored bytes
    payload = scene.run[T].payload
    assert isinstance(payload, dict)
    reordered = dict(reversed(list(payload.items())))
    scene.set_payload(T, body=json.dumps(reordered, indent=3).encode())
    scene.set_payload(T + 1, body=_body_of(scene, T))  # but another event's payload is caught
    scene.db.close()
    store = SQLiteStore(scene.path)
    try:
        report = store.verify(RUN)
        assert report.first_failure is not None
        assert (report.first_failure.seq, report.first_failure.check) == (T + 1, PAYLOAD)
        assert len(report.failures) == 1
    finally:
        store.close()


def test_erasure_is_allowed_and_reported_not_a_failure(tmp_path: Path, vectors_dir: Path) -> None:
    path = tmp_path / "store.db"
    store = SQLiteStore(path)
    import_jsonl(store, vectors_dir / "events" / "refund_run.jsonl")
    store.close()
    db = sqlite3.connect(path, isolation_level=None)  # triggers left in place
    db.execute(
        "UPDATE payloads SET body=NULL, salt=NULL WHERE id IN "
        "(SELECT id FROM events WHERE seq IN (1, 2))"
    )
    db.close()
    store = SQLiteStore(path)
    try:
        report = store.verify(RUN)
        assert report.ok, report.render()
        assert report.erased == (1, 2)
        assert [e.payload for e in store.read(RUN)][1:3] == [None, None]
    finally:
        store.close()


@pytest.mark.parametrize(("attack", "expect"), ATTACKS)
def test_parallel_verification_reports_exactly_what_the_serial_one_does(
    scene: Scene, attack: Attack, expect: Expect
) -> None:
    """Two worker processes, runs cut in chunks of 3 events (seq 5 ends a chunk, 6 begins the
    next): every report, field for field, is the serial verifier's."""
    from tachograph.store.parallel import verify_all_parallel

    attack(scene)
    scene.db.close()
    store = SQLiteStore(scene.path)
    try:
        serial = [r.to_dict() for r in store.verify_all()]
        parallel = [r.to_dict() for r in verify_all_parallel(store, workers=2, chunk=2)]
        assert parallel == serial
    finally:
        store.close()


@pytest.mark.parametrize("body", [b'{"', b'{"tool": NaN}', b"\xff\xfe"])
def test_a_payload_that_is_not_json_is_named_as_such(scene: Scene, body: bytes) -> None:
    """The message says the stored payload is not JSON of the profile; it read "payload and
    salt digest to sha256:(stored payload is outside the JSON profile)", a digest that is
    none."""
    scene.set_payload(T, body=body)
    scene.db.close()
    with SQLiteStore(scene.path) as store:
        report = store.verify(RUN, tenant=TENANT)
    first = report.first_failure
    assert first is not None
    assert (first.seq, first.check) == (T, PAYLOAD)
    assert "the stored payload is not JSON of the profile" in first.message
    assert "digest to sha256:(" not in report.render()
