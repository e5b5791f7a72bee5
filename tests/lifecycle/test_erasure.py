"""Erasure: payload and salt go, the chain verifies (erased, not tampered), by both verifiers;
replay reports the erased steps; every erasure is in the store audit; erasing is idempotent."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path

import pytest

import tachograph
from tachograph.demo import agent as demo
from tachograph.errors import RecordingError, RunNotFound
from tachograph.lifecycle.audit import verify_audit
from tachograph.lifecycle.erasure import (
    SUBJECT_WITHHELD,
    SubjectRule,
    erase,
    link_subject,
    subject_ids,
    subject_in_audit,
)
from tachograph.privacy import KeyRing, Redactor
from tachograph.replay.report import DivergenceKind
from tachograph.store import SQLiteStore
from test_independent_verifier import audit as independent_audit


def _lines(store: SQLiteStore, run_id: str) -> list[str]:
    out = io.BytesIO()
    tachograph.export_run(store, run_id, out)
    return out.getvalue().decode("utf-8").rstrip("\n").split("\n")


def _types(store: SQLiteStore, run_id: str) -> dict[int, str]:
    return {e.seq: e.type for e in store.read(run_id)}


def test_erasing_seqs_keeps_the_chain_verifying_for_both_verifiers(
    store: SQLiteStore, demo_run: str
) -> None:
    report = erase(store, demo_run, seqs=[2, 3], reason="user request 17", actor="dpo")
    assert report.erased == 2
    assert [(r.run_id, r.seqs, r.erased) for r in report.runs] == [(demo_run, (2, 3), 2)]
    events = store.events(demo_run)
    assert [e.seq for e in events if e.erased] == [2, 3]
    assert all(e.payload is None and e.salt is None for e in events if e.seq in (2, 3))
    verified = store.verify(demo_run)
    assert verified.ok
    assert verified.erased == (2, 3)
    assert independent_audit(_lines(store, demo_run)) == [2, 3]


def test_erasing_by_type_and_the_whole_run(store: SQLiteStore, demo_run: str) -> None:
    types = _types(store, demo_run)
    report = erase(store, demo_run, types=["model.*"], reason="raw model output")
    expected = tuple(s for s, t in types.items() if t.startswith("model."))
    assert report.runs[0].seqs == expected
    assert report.erased == len(expected) > 0
    whole = erase(store, demo_run, reason="everything")
    assert whole.erased == len(types) - len(expected)
    assert independent_audit(_lines(store, demo_run)) == list(range(len(types)))
    assert store.verify(demo_run).ok


def test_erasing_again_erases_and_records_nothing_more(store: SQLiteStore, demo_run: str) -> None:
    erase(store, demo_run, seqs=[3], reason="first")
    records = list(store.read_audit())
    again = erase(store, demo_run, seqs=[3], reason="second")
    assert again.erased == 0
    assert again.runs[0].seqs == (3,)
    assert list(store.read_audit()) == records
    assert store.verify(demo_run).erased == (3,)


def test_every_erasure_is_in_the_hash_chained_audit(store: SQLiteStore, demo_run: str) -> None:
    erase(store, demo_run, seqs=[2], reason="ticket 1", actor="alice")
    erase(store, demo_run, seqs=[3, 4], reason="ticket 2", actor="bob")
    records = list(store.read_audit())
    assert [(r.seq, r.action, r.actor) for r in records] == [
        (0, "erase", "alice"),
        (1, "erase", "bob"),
    ]
    assert records[1].detail == {"reason": "ticket 2", "run_id": demo_run, "seqs": [3, 4]}
    assert records[1].prev_hash == records[0].hash
    report = verify_audit(store)
    assert report.ok
    assert report.records == 2
    assert report.head == records[1].hash


def test_a_tampered_audit_record_fails_verification(store: SQLiteStore, demo_run: str) -> None:
    erase(store, demo_run, seqs=[2], reason="real reason")
    erase(store, demo_run, seqs=[3], reason="second")
    raw = sqlite3.connect(store.path, isolation_level=None)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        raw.execute("UPDATE store_audit SET actor='mallory'")
    raw.execute("DROP TRIGGER store_audit_append_only_update")
    raw.execute("UPDATE store_audit SET detail=? WHERE seq=0", (b'{"reason":"other"}',))
    raw.close()
    report = verify_audit(store)
    assert not report.ok
    assert [seq for seq, _ in report.problems] == [0, 1]  # its hash, and the link after it


def test_the_database_refuses_erasing_half_an_event(store: SQLiteStore, demo_run: str) -> None:
    raw = sqlite3.connect(store.path, isolation_level=None)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="only be erased"):
            raw.execute("UPDATE payloads SET body = NULL WHERE id = 1")
    finally:
        raw.close()


def test_a_reason_is_required_and_unknown_seqs_erase_nothing(
    store: SQLiteStore, demo_run: str
) -> None:
    with pytest.raises(RecordingError, match="reason"):
        erase(store, demo_run, seqs=[1], reason=" ")
    with pytest.raises(RunNotFound, match="no event at seq 99"):
        erase(store, demo_run, seqs=[1, 99], reason="typo")
    assert store.verify(demo_run).erased == ()
    assert list(store.read_audit()) == []


# -- the plaintext is gone from every file ------------------------------------------------


def _planted(store: SQLiteStore, runs: int, size: int) -> list[str]:
    ids = []
    for n in range(runs):
        secret = f"PLANTED-{n}-SECRET-" + "s" * size
        with tachograph.record(store, actor="planter", input={"note": secret}) as run:
            tachograph.emit("acme.note", {"text": secret, "other": "keep me"})
            tachograph.decide("route", "b", chosen_from=["a", "b"])
        ids.append(run.run_id)
    return ids


def _hits(path: Path, needle: bytes) -> int:
    total = 0
    for name in (path.name, path.name + "-wal", path.name + "-journal"):
        target = path.with_name(name)
        if target.exists():
            total += target.read_bytes().count(needle)
    return total


@pytest.mark.parametrize("size", [10, 6000], ids=["inline", "overflow-pages"])
def test_after_erasure_the_plaintext_is_in_no_file(tmp_path: Path, size: int) -> None:
    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    try:
        ids = _planted(store, 12, size)
        assert _hits(path, b"PLANTED-3-SECRET") > 0  # in the -wal and/or the file
        for run_id in ids[2:6]:
            erase(store, run_id, reason="test")
        # Free pages and unused space in pages are part of the file: a raw scan covers them.
        for n in range(2, 6):
            assert _hits(path, f"PLANTED-{n}-SECRET".encode()) == 0, n
        assert _hits(path, b"PLANTED-7-SECRET") > 0  # the others are still there
        assert path.with_name("runs.db-wal").stat().st_size == 0
        assert store.integrity_check() == "ok"
        assert all(r.ok for r in store.verify_all())
    finally:
        store.close()
    # A VACUUM rebuilds the file from live rows only: the erased text is not among them.
    raw = sqlite3.connect(path)
    raw.execute("VACUUM")
    raw.close()
    assert _hits(path, b"PLANTED-3-SECRET") == 0
    assert _hits(path, b"PLANTED-7-SECRET") > 0


def test_without_secure_delete_the_plaintext_would_survive(tmp_path: Path) -> None:
    # The control: the same erasure by hand, without the pragma and the checkpoint, leaves the
    # text in the files, so the test above is measuring something.
    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    try:
        _planted(store, 4, 10)
        db = store._db
        db.execute("PRAGMA secure_delete = OFF")
        db.execute("UPDATE payloads SET body = NULL, salt = NULL")
        assert _hits(path, b"PLANTED-1-SECRET") > 0
    finally:
        store.close()


# -- replay -------------------------------------------------------------------------------


def test_replay_reports_erased_steps_as_unreplayable(store: SQLiteStore, demo_run: str) -> None:
    types = _types(store, demo_run)
    response = next(s for s, t in types.items() if t == "model.response")
    erase(store, demo_run, seqs=[response], reason="raw output")
    report = tachograph.replay(store, demo_run, demo.billing_agent)
    assert not report.reproduced
    assert report.erased == (response,)
    first = report.divergences[0]
    assert first.kind is DivergenceKind.UNREPLAYABLE
    assert first.seq == response


def test_replay_of_a_run_whose_start_was_erased_is_a_report(
    store: SQLiteStore, demo_run: str
) -> None:
    erase(store, demo_run, seqs=[0], reason="input had personal data")
    report = tachograph.replay(store, demo_run, demo.billing_agent)
    assert report.verdict == "unreplayable"
    assert report.unreplayable[0]["type"] == "run.started"


# -- data subjects ------------------------------------------------------------------------


@pytest.fixture
def no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TACHOGRAPH_PII_KEY", "TACHOGRAPH_PII_KEY_ID", "TACHOGRAPH_PII_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)


def test_one_subject_is_erased_across_runs(store: SQLiteStore, no_key: None) -> None:
    rule = SubjectRule(store, paths=["$.input.customer", "$.customer"])
    runs = {}
    for customer in ("cust-1", "cust-2", "cust-1"):
        with tachograph.record(
            store, actor="support", input={"customer": customer}, listeners=[rule]
        ) as run:
            tachograph.emit("acme.lookup", {"customer": customer, "note": f"{customer} details"})
            tachograph.emit("acme.lookup", {"customer": None, "note": "nobody"})
        runs.setdefault(customer, []).append(run.run_id)
    tachograph.capture.recorder.writer_for(store).drain()
    report = erase(store, subject="cust-1", reason="art. 17 request")
    assert sorted(r.run_id for r in report.runs) == sorted(runs["cust-1"])
    for run_id in runs["cust-1"]:
        verified = store.verify(run_id)
        assert verified.ok
        # the linked events, run.started (the key secret) and run.finished (the output)
        assert verified.erased == (0, 1, 3)
        assert independent_audit(_lines(store, run_id)) == [0, 1, 3]
    (other,) = runs["cust-2"]
    assert store.verify(other).erased == ()
    erasures = [r for r in store.read_audit() if r.action == "erase"]
    # the record of an erasure does not hold what was erased: no key, no name
    assert {r.detail.get("subject") for r in erasures} == {SUBJECT_WITHHELD}
    assert [r.detail["unlinked"] for r in erasures] == [2, 2]
    assert store.subject_events("default", "cust-1") == []
    assert len(store.subject_events("default", "cust-2")) == 2
    again = erase(store, subject="cust-1", reason="art. 17 request")
    assert (again.runs, again.erased) == ((), 0)
    assert list(store.audit_of("erase")) == erasures  # and records nothing more


def test_linking_by_hand_and_narrowing_by_run(store: SQLiteStore, demo_run: str) -> None:
    second = tachograph.record_run(demo.billing_agent, "Order A-9 arrived damaged.", store=store)
    assert link_subject(store, demo_run, "p-9", seqs=[4, 5]) == 2
    assert link_subject(store, demo_run, "p-9", seqs=[4]) == 0  # already linked
    link_subject(store, second.run_id, "p-9")
    report = erase(store, demo_run, subject="p-9", reason="one run only")
    last = store.run_info(demo_run).events - 1  # run.finished: its output goes too
    assert [(r.run_id, r.seqs) for r in report.runs] == [(demo_run, (0, 4, 5, last))]
    assert store.verify(second.run_id).erased == ()
    count = store.run_info(second.run_id).events
    assert store.subject_events("default", "p-9") == [(second.run_id, s) for s in range(count)]


def test_a_subjects_erasure_takes_the_answers_to_its_requests(store: SQLiteStore) -> None:
    """docs/privacy.md's rule links the request naming the customer; what the tool returned
    about them (and the run's output made of it) was left behind before."""

    @tachograph.tool(effect="read", name="find_customer")
    def find_customer(customer_id: str) -> dict[str, str]:
        return {"email": "ann.leak@example.com", "phone": "+44 20 7946 0958"}

    @tachograph.agent(name="support", tools=[find_customer])
    def support(task: dict[str, str]) -> str:
        found = find_customer(customer_id=task["customer"])
        return f"emailed {found['email']}"

    rule = SubjectRule(store, paths=["$.args.customer_id", "$.input.customer"])
    result = tachograph.record_run(
        support, {"customer": "cust-4471"}, store=store, listeners=[rule]
    )
    tachograph.capture.recorder.writer_for(store).drain()
    erase(store, subject="cust-4471", reason="art. 17")
    events = store.events(result.run_id)
    leftover = [e.type for e in events if "ann.leak" in str(e.payload)]
    assert leftover == []
    assert store.verify(result.run_id).ok


def _subject_runs(store: SQLiteStore) -> dict[str, list[str]]:
    rule = SubjectRule(store, paths=["$.input.customer", "$.customer"])
    runs: dict[str, list[str]] = {}
    for customer in ("cust-QX71", "cust-QX72", "cust-QX71"):
        with tachograph.record(
            store, actor="support", input={"customer": customer}, listeners=[rule]
        ) as run:
            tachograph.emit("acme.lookup", {"customer": customer, "note": f"{customer} notes"})
        runs.setdefault(customer, []).append(run.run_id)
    tachograph.capture.recorder.writer_for(store).drain()
    return runs


@pytest.mark.parametrize("keyed", [False, True], ids=["no-key", "keyed"])
def test_after_a_subjects_erasure_its_id_is_in_no_file(
    tmp_path: Path, no_key: None, keyed: bool
) -> None:
    """The id was in the payloads, in the subject links and in the erasure's own audit
    record; a raw scan of the database and its -wal finds it in none of them afterwards,
    while the other customer's id is still there."""
    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    ring = KeyRing.of(b"k" * 16, key_id="k1") if keyed else None
    try:
        _subject_runs(store)
        assert _hits(path, b"cust-QX71") > 0
        assert _hits(path, b"cust-QX72") > 0
        erase(store, subject="cust-QX71", reason="art. 17 request 118", keys=ring)
        assert _hits(path, b"cust-QX71") == 0
        assert _hits(path, b"cust-QX72") > 0
        named = {r.detail["subject"] for r in store.audit_of("erase")}
        if ring is None:
            assert named == {SUBJECT_WITHHELD}
        else:  # the key's holder finds the record of the request: the redactor's token
            assert named == {Redactor(keyring=ring).token("cust-QX71")}
            assert named == {ring.token("cust-QX71")}
        assert verify_audit(store).ok
        assert all(r.ok for r in store.verify_all())
    finally:
        store.close()


def test_the_environments_key_names_the_subject_and_a_token_stays_a_token(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TACHOGRAPH_PII_KEY_FILE", raising=False)
    monkeypatch.setenv("TACHOGRAPH_PII_KEY", "ab" * 16)
    monkeypatch.setenv("TACHOGRAPH_PII_KEY_ID", "env1")
    _subject_runs(store)
    erase(store, subject="cust-QX72", reason="art. 17")
    (record,) = store.audit_of("erase")
    assert record.detail["subject"] == KeyRing.from_env().token("cust-QX72")  # type: ignore[union-attr]
    assert record.detail["subject"].startswith("pii1:env1:")
    token = "pii1:k1:0123456789abcdef"  # a rule linked the redacted value: it is no name
    assert subject_in_audit(token, KeyRing.of(b"k" * 16, key_id="k1")) == token
    ring = KeyRing.of(b"k" * 16, key_id="k1")
    for named in ("pii1:ann.lee@example.com", f"{token} and more", "pii1:k1:0123"):
        assert subject_in_audit(named, None) == SUBJECT_WITHHELD  # only a whole token passes
        assert subject_in_audit(named, ring) == ring.token(named)
    assert subject_in_audit("cust-QX72", None) == SUBJECT_WITHHELD


def test_links_left_by_an_earlier_erasure_go_when_the_subject_is_erased_again(
    store: SQLiteStore, demo_run: str, no_key: None
) -> None:
    """A store erased by an older version kept the links beside erased payloads: erasing the
    subject again removes them, with a record that says so and erases nothing more."""
    link_subject(store, demo_run, "p-3", seqs=[4, 5])
    erase(store, demo_run, seqs=[0, 4, 5], reason="erased by seq, links left")
    report = erase(store, subject="p-3", reason="art. 17")
    last = store.run_info(demo_run).events - 1
    assert [(r.run_id, r.seqs, r.erased) for r in report.runs] == [(demo_run, (0, 4, 5, last), 1)]
    assert store.subject_events("default", "p-3") == []
    records = list(store.audit_of("erase"))
    assert [r.detail.get("unlinked") for r in records] == [None, 2]
    assert records[1].detail["seqs"] == [last]


def test_a_subjects_erasure_run_again_finishes_a_scrub_readers_held_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_key: None
) -> None:
    """Readers holding an old snapshot keep the erased text in the -wal; the error says to
    run the erasure again. The first run already removed the links, so the second finds
    nothing linked: it must still finish the scrub."""
    from tachograph.errors import StoreUnavailable
    from tachograph.store import sqlite_lifecycle

    monkeypatch.setattr(sqlite_lifecycle, "_SCRUB_DEADLINE", 0.3)
    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    try:
        _subject_runs(store)
        reader = sqlite3.connect(path)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM events").fetchone()  # an old snapshot, held
        with pytest.raises(StoreUnavailable, match="run the erasure again"):
            erase(store, subject="cust-QX72", reason="art. 17")
        assert _hits(path, b"cust-QX72") > 0  # old page images in the -wal
        reader.rollback()
        reader.close()
        again = erase(store, subject="cust-QX72", reason="art. 17")
        assert again.runs == ()  # one run, erased and unlinked by the first
        assert _hits(path, b"cust-QX72") == 0
        assert _hits(path, b"cust-QX71") > 0
    finally:
        store.close()


def test_a_subject_linked_by_its_token_is_found_by_the_id_a_user_types(
    tmp_path: Path, no_key: None
) -> None:
    """Under the PII policy the rule's path holds the address's token, and so does the
    link: the erasure looks for the id as given and as its token under each key (a run
    recorded before a rotation holds the older key's)."""
    from tachograph.privacy import pii_policy

    old, new = KeyRing.of(b"o" * 16, key_id="old"), KeyRing.of(b"n" * 16, key_id="new")
    ring = KeyRing(current="new", keys={**new.keys, **old.keys})
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        rule = SubjectRule(store, paths=["$.input.customer"])
        runs = []
        for key in (old, new):
            with tachograph.record(
                store,
                actor="support",
                input={"customer": "Ann.Lee@example.com"},
                processors=[pii_policy(key)],
                listeners=[rule],
            ) as run:
                pass
            runs.append(run.run_id)
        tachograph.capture.recorder.writer_for(store).drain()
        linked = {store.subject_events("default", key.token("ann.lee@example.com"))[0][0]
                  for key in (old, new)}  # fmt: skip
        assert linked == set(runs)
        report = erase(store, subject="Ann.Lee@example.com", reason="art. 17", keys=ring)
        assert sorted(r.run_id for r in report.runs) == sorted(runs)
        assert all(store.verify(r).ok and 0 in store.verify(r).erased for r in runs)
        for key in (old, new):
            assert store.subject_events("default", key.token("ann.lee@example.com")) == []
    finally:
        store.close()


def test_a_narrowed_subject_erasure_keeps_the_links_for_the_rest(
    store: SQLiteStore, no_key: None
) -> None:
    """``--subject`` with ``--seq``: what was not erased (the answer to the request, the
    output) must stay findable by a later erasure of the subject."""

    @tachograph.tool(effect="read", name="find_customer")
    def find_customer(customer_id: str) -> dict[str, str]:
        return {"email": "ann.leak@example.com"}

    rule = SubjectRule(store, paths=["$.args.customer_id"], types=["tool.requested"])
    result = tachograph.record_run(
        lambda task: find_customer(customer_id=task), "cust-77", store=store, listeners=[rule]
    )
    tachograph.capture.recorder.writer_for(store).drain()
    (request,) = [seq for _, seq in store.subject_events("default", "cust-77")]
    first = erase(store, subject="cust-77", seqs=[request], reason="narrowed")
    assert [r.seqs for r in first.runs] == [(0, request)]
    assert store.subject_events("default", "cust-77") == [(result.run_id, request)]
    erase(store, subject="cust-77", reason="the rest")
    leftover = [e.type for e in store.events(result.run_id) if "ann.leak" in str(e.payload)]
    assert leftover == []
    assert store.subject_events("default", "cust-77") == []


def test_a_subjects_erasure_defaults_to_the_stores_tenant_and_takes_a_path(
    tmp_path: Path, no_key: None
) -> None:
    path = tmp_path / "runs.db"
    with tachograph.open_store(f"sqlite:///{path}?tenant=acme", create=True) as acme:
        rule = SubjectRule(acme, paths=["$.input.customer"])
        with tachograph.record(acme, actor="a", input={"customer": "cust-5"}, listeners=[rule]):
            pass
        tachograph.capture.recorder.writer_for(acme).drain()
        report = erase(acme, subject="cust-5", reason="confined")
        assert [r.tenant for r in report.runs] == ["acme"]
    assert erase(str(path), subject="cust-5", tenant="acme", reason="again").runs == ()
    with pytest.raises(RecordingError, match="SubjectRule needs the open store"):
        SubjectRule(str(path), paths=["$.x"])  # type: ignore[arg-type]


def test_a_secrets_marker_is_no_subjects_form_and_one_person_erases_alone(
    tmp_path: Path, no_key: None
) -> None:
    """Two IAM users' access key ids as subject ids: the default redaction links both under
    the same marker. The id's forms hold per-person tokens only, never a marker, so erasing
    one person leaves the other's data."""
    ring = KeyRing.of(b"k" * 16, key_id="k1")
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        rule = SubjectRule(store, paths=["$.input.user"])
        runs = {}
        for user in ("AKIAABCDEFGHIJKLMNOP", "AKIAQRSTUVWXYZ234567"):
            with tachograph.record(store, actor="a", input={"user": user}, listeners=[rule]) as run:
                tachograph.emit("acme.note", {"user": user})
            runs[user] = run.run_id
        tachograph.capture.recorder.writer_for(store).drain()
        assert "[redacted:" not in "".join(subject_ids("AKIAABCDEFGHIJKLMNOP", ring))
        erase(store, subject="AKIAABCDEFGHIJKLMNOP", reason="one person", keys=ring)
        assert store.verify(runs["AKIAQRSTUVWXYZ234567"]).erased == ()
    finally:
        store.close()


def test_every_form_of_the_id_goes_in_one_transaction_with_one_record(
    store: SQLiteStore, demo_run: str, no_key: None
) -> None:
    ring = KeyRing.of(b"k" * 16, key_id="k1")
    link_subject(store, demo_run, "zoe@example.com", seqs=[4])
    link_subject(store, demo_run, ring.token("zoe@example.com"), seqs=[5])
    erase(store, subject="zoe@example.com", reason="art. 17", keys=ring)
    (record,) = store.audit_of("erase")
    assert record.detail["unlinked"] == 2
    assert store.subject_events("default", "zoe@example.com") == []


def test_a_link_to_a_run_the_store_lacks_does_not_block_the_erasure(
    store: SQLiteStore, demo_run: str, no_key: None
) -> None:
    link_subject(store, demo_run, "p-1", seqs=[4])
    store.link_subjects("default", "run_never_committed", [(0, "p-1"), (3, "p-1")])
    report = erase(store, subject="p-1", reason="art. 17")
    assert {r.run_id: r.erased for r in report.runs}[demo_run] >= 2
    assert store.subject_events("default", "p-1") == []
    with pytest.raises(RunNotFound):
        link_subject(store, "run_not_there", "p-2", seqs=[1])


def test_a_narrowed_subject_erasure_is_held_to_the_run_and_to_its_links(
    store: SQLiteStore, demo_run: str, no_key: None
) -> None:
    link_subject(store, demo_run, "p-4", seqs=[4])
    with pytest.raises(RunNotFound, match="has no event at seq 999"):
        erase(store, demo_run, subject="p-4", seqs=[999], reason="typo")
    assert store.verify(demo_run).erased == ()  # not even run.started
    report = erase(store, demo_run, subject="p-4", seqs=[5], reason="not a linked event")
    assert report.runs == ()
    assert store.verify(demo_run).erased == ()


def test_subject_ids_are_text_and_valid_unicode(store: SQLiteStore, demo_run: str) -> None:
    store.link_subjects("default", demo_run, [(4, "12345")])
    report = erase(store, subject=12345, reason="an integer id")  # type: ignore[arg-type]
    assert [r.run_id for r in report.runs] == [demo_run]
    with pytest.raises(RecordingError, match="not valid Unicode"):
        erase(store, subject="\udcff", reason="bad argv")
    with pytest.raises(RecordingError, match="must not be empty"):
        erase(store, subject="", reason="empty")


@pytest.mark.parametrize("engine", ["sqlite", "memory"])
def test_a_store_confined_to_a_tenant_erases_and_links_no_other(
    tmp_path: Path, engine: str
) -> None:
    from tachograph.errors import StoreError
    from tachograph.store.audit import AuditEntry

    url = f"sqlite:///{tmp_path / 'runs.db'}?tenant=acme" if engine == "sqlite" else "memory://"
    with tachograph.open_store(url, create=True) as acme:
        acme.tenant = "acme"  # the memory engine takes no ?tenant=: confined by hand
        entry = AuditEntry(action="erase", actor="t", tenant="other", detail={"reason": "r"})
        for call in (
            lambda: acme.erase("other", "run-a", [0], audit=entry),
            lambda: acme.delete_run("other", "run-a", audit=entry),
            lambda: acme.link_subjects("other", "run-a", [(0, "p")]),
            lambda: acme.subject_events("other", "p"),
        ):
            with pytest.raises(StoreError, match="confined to tenant 'acme'"):
                call()


def test_a_tenants_view_of_the_audit_checks_each_record_and_link_it_sees(
    store: SQLiteStore, demo_run: str
) -> None:
    """What a role confined by row-level security sees of the audit (its tenant's records,
    with gaps where the others' were): each record's hash and each link between two it sees
    in a row are checked; a gap is counted, not taken for a break."""
    import dataclasses

    from tachograph.lifecycle.audit import _verify_visible

    for n in range(4):
        erase(store, demo_run, seqs=[2 + n], reason=f"r{n}")
    records = list(store.read_audit())
    assert len(records) >= 4
    seen = [r for i, r in enumerate(records) if i not in (1, 2)]  # two hidden
    report = _verify_visible(seen)
    assert report.ok, report.render()
    assert report.hidden == 2
    assert "2 record(s) of other tenants are not visible" in report.render()
    forged = [*seen]
    forged[0] = dataclasses.replace(forged[0], actor="mallory")
    bad = _verify_visible(forged)
    assert [seq for seq, _ in bad.problems] == [0]  # its hash; the next is after a gap
    forged = [*seen]
    forged[-1] = dataclasses.replace(forged[-1], prev_hash="sha256:" + "0" * 64)
    assert not _verify_visible(forged).ok  # a link between two records it sees
