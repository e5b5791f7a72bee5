"""Sealing a store: per-run verdicts, tampering by whoever holds the store, witnesses."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from tachograph.errors import SealingError
from tachograph.record.checkpoint import Checkpoint, Note, verify_cosignature
from tachograph.record.merkle import SealLeaf
from tachograph.sealing import HTTPWitness, SealLog, Witness, WitnessRefused
from tachograph.store import SQLiteStore
from tachograph.store.base import SealRow

from .helpers import make_key, record, start_witness, tacho


def _verdicts(db: Path, *args: str) -> dict[str, dict[str, object]]:
    result = tacho("verify", "--json", *args, store=db)
    data = json.loads(result.output)
    assert result.exit_code == (0 if data["ok"] else 1)
    return {run["run_id"]: run for run in data["runs"]}


def _raw(db: Path) -> sqlite3.Connection:
    raw = sqlite3.connect(db, isolation_level=None)
    for trigger in ("events_append_only_delete", "payloads_no_delete", "seals_append_only_delete"):
        raw.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    return raw


def test_runs_say_how_far_they_are_sealed(tmp_path: Path) -> None:
    key, _ = make_key(tmp_path / "keys")
    db = tmp_path / "store" / "t.db"
    with SQLiteStore(db) as store:
        record(store, "done", 12, key=key)
        record(store, "running", 8, key=key, finish=False)
        record(store, "short", 3, key=key, finish=False)
    runs = _verdicts(db, "--key", str(key.verifier))
    assert runs["done"]["seal"]["status"] == "sealed"
    assert runs["done"]["seal"]["final"] is True
    assert runs["done"]["seal"]["sealed_seq"] == 11
    assert runs["running"]["seal"]["sealed_seq"] == 4
    assert runs["running"]["seal"]["unsealed_events"] == 3
    assert runs["short"]["seal"]["status"] == "unsealed"
    assert runs["short"]["seal"]["reason"] == (
        "no seal of this run yet: it is still running or stopped before its first seal, "
        "or it was recorded with sealing off"
    )
    assert runs["done"]["seal"]["signed_by"] == key.name
    text = tacho("verify", "--key", str(key.verifier), store=db).output
    assert "done: verified" in text
    assert "sealed up to seq 4 by checkpoint of size 4" in text
    assert "3 later event(s) not yet sealed" in text
    # Without a trusted key no checkpoint vouches for a run: the stored seals still say how
    # far each run is sealed (unsigned), and verify says why no checkpoint counts.
    runs = _verdicts(db)
    assert runs["done"]["seal"]["status"] == "unsigned"
    assert runs["done"]["seal"]["sealed_seq"] == 11
    assert runs["done"]["sealed"] is False
    assert "no trusted verifier key" in runs["done"]["seal"]["reason"]
    assert runs["short"]["seal"]["status"] == "unsealed"


def test_without_a_key_seals_wait_for_a_checkpoint(tmp_path: Path) -> None:
    key, key_file = make_key(tmp_path / "keys")
    db = tmp_path / "store" / "t.db"
    with SQLiteStore(db) as store:
        record(store, "run-a", 6, key=None)
        assert store.seal_count("default") == 2
        assert store.latest_checkpoint("default") is None
    runs = _verdicts(db, "--key", str(key.verifier))
    assert "2 seal(s) wait for one" in runs["run-a"]["seal"]["reason"]
    assert tacho("seal", "--key-file", str(key_file), store=db).exit_code == 0
    runs = _verdicts(db, "--key", str(key.verifier))
    assert runs["run-a"]["seal"]["status"] == "sealed"


def test_a_cut_tail_after_a_seal_is_detected(tmp_path: Path) -> None:
    key, _ = make_key(tmp_path / "keys")
    db = tmp_path / "store" / "t.db"
    with SQLiteStore(db) as store:
        record(store, "run-a", 12, key=key, finish=False)  # sealed at 4 and 9
    raw = _raw(db)
    # The owner cuts seq 8.. and makes the run summary agree, so the chain alone looks whole.
    head = raw.execute("SELECT hash FROM events WHERE run_id='run-a' AND seq=7").fetchone()[0]
    raw.execute("DELETE FROM payloads WHERE id IN (SELECT id FROM events WHERE seq>=8)")
    raw.execute("DELETE FROM events WHERE run_id='run-a' AND seq>=8")
    raw.execute("UPDATE runs SET events=8, head_hash=? WHERE run_id='run-a'", (head,))
    raw.close()
    run = _verdicts(db, "--key", str(key.verifier))["run-a"]
    assert run["first_failure"] is None  # the chain verifies
    assert run["status"] == "failed"
    assert "stops at seq 7, before the sealed seq 9: its tail was cut" in run["seal"]["reason"]


def test_a_seal_moved_to_another_run_in_the_store_is_detected(tmp_path: Path) -> None:
    key, _ = make_key(tmp_path / "keys")
    db = tmp_path / "store" / "t.db"
    with SQLiteStore(db) as store:
        record(store, "run-a", 6, key=key)
        record(store, "run-b", 6, key=key)
    raw = sqlite3.connect(db, isolation_level=None)
    raw.execute("DROP TRIGGER seals_append_only_update")
    raw.execute("UPDATE seals SET run_id='run-b' WHERE run_id='run-a' AND seq=5")
    raw.close()
    run = _verdicts(db, "--key", str(key.verifier))["run-b"]
    assert run["seal"]["status"] == "failed"
    assert "a seal was moved" in run["seal"]["reason"]


def test_changed_seals_no_longer_hash_to_the_signed_root(tmp_path: Path) -> None:
    key, _ = make_key(tmp_path / "keys")
    db = tmp_path / "store" / "t.db"
    with SQLiteStore(db) as store:
        record(store, "run-a", 6, key=key)
    raw = _raw(db)
    raw.execute("DELETE FROM seals WHERE idx=1")
    raw.close()
    run = _verdicts(db, "--key", str(key.verifier))["run-a"]
    assert "seals were removed" in run["seal"]["reason"]
    with SQLiteStore(db) as store, pytest.raises(Exception, match="fewer seals"):
        SealLog(store, key=key).seal([SealLeaf("default", "x", 0, "sha256:" + "0" * 64, False)])


def test_a_checkpoint_over_an_inconsistent_tree_is_never_issued(tmp_path: Path) -> None:
    key, _ = make_key(tmp_path / "keys")
    other, _ = make_key(tmp_path / "other", "intruder.example/tachograph")
    with SQLiteStore(tmp_path / "t.db") as store:
        log = SealLog(store, key=key)
        log.seal([SealLeaf("default", "r", 0, "sha256:" + "1" * 64, False)])
        # A checkpoint in the store not signed by this log's key is not extended.
        intruder = SealLog(store, key=other)
        with pytest.raises(Exception, match="not signed by"):
            intruder.seal([SealLeaf("default", "r", 1, "sha256:" + "2" * 64, False)])


def test_keys_init_writes_a_private_file_outside_the_store(tmp_path: Path) -> None:
    db = tmp_path / "store" / "t.db"
    SQLiteStore(db).close()
    key_file = tmp_path / "secret" / "log.key"
    result = tacho(
        "keys", "init", "-o", str(key_file), "--name", "acme.example/log", "--json", store=db
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["verifier_key"].startswith("acme.example/log+")
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key_file.read_text().startswith("PRIVATE+KEY+acme.example/log+")
    assert tacho("keys", "init", "-o", str(key_file), store=db).exit_code == 2  # never overwrite
    inside = tacho("keys", "init", "-o", str(db.parent / "k.key"), store=db)
    assert inside.exit_code == 2
    assert "inside the store's folder" in inside.output
    assert not (db.parent / "k.key").exists()
    assert key_file.read_bytes() not in db.read_bytes()


def test_the_directory_witness_refuses_forks_and_equivocation(tmp_path: Path) -> None:
    key, _ = make_key(tmp_path / "keys")
    wkey, _ = make_key(tmp_path / "keys", "witness.example/w1", witness=True)
    witness = Witness(tmp_path / "witness", log_keys=[key.verifier], key=wkey)
    with SQLiteStore(tmp_path / "a.db") as store:
        log = SealLog(store, key=key, witnesses=[witness])
        for i in range(5):
            log.seal([SealLeaf("default", "r", i, "sha256:" + f"{i:064x}", False)])
            assert log.witness_errors == []
        assert log.cosigned is not None
        held = witness.latest(log.origin)
        assert held is not None
        assert Checkpoint.parse(held.text).size == 5
    # Another store, the same key, another history: a fork of the log.
    with SQLiteStore(tmp_path / "b.db") as store:
        fork = SealLog(store, key=key, witnesses=[witness])
        for i in range(6):
            fork.seal([SealLeaf("default", "forged", i, "sha256:" + f"{i + 7:064x}", False)])
        assert any("refused a fork" in e for e in fork.witness_errors)
        same_size = Checkpoint(fork.origin, 5, bytes(32)).note(key)
        with pytest.raises(WitnessRefused, match="equivocation") as info:
            witness.add_checkpoint(5, [], same_size)
        assert info.value.what == "equivocation"
    held = witness.latest(log.origin)
    assert held is not None
    assert Checkpoint.parse(held.text).size == 5  # still the honest one
    assert list((tmp_path / "witness").glob("*.equivocation-*.txt"))


def test_issuing_with_no_seal_waiting_pushes_the_latest_checkpoint(tmp_path: Path) -> None:
    key, _ = make_key(tmp_path / "keys")
    wkey, _ = make_key(tmp_path / "wkeys", "witness.example/w1", witness=True)
    witness = Witness(tmp_path / "witness", log_keys=[key.verifier], key=wkey)
    with SQLiteStore(tmp_path / "store" / "t.db") as store:
        record(store, "run-a", 12, key=key)  # checkpointed, pushed to no witness
        log = SealLog(store, key=key, witnesses=[witness])
        assert witness.latest(log.origin) is None
        note = log.issue()
        assert log.issued_new is False
        assert log.witness_errors == []
        held = witness.latest(log.origin)
        assert held is not None
        assert held.text == note.text
        assert log.cosigned is not None
        assert verify_cosignature(log.cosigned, wkey.verifier) is not None
        # The witness holds it now: pushing it again is accepted (from the size it holds).
        again = SealLog(store, key=key, witnesses=[witness])
        again.issue()
        assert again.witness_errors == []


def test_pushing_a_checkpoint_smaller_than_the_witness_holds_is_a_witness_error(
    tmp_path: Path,
) -> None:
    key, _ = make_key(tmp_path / "keys")
    witness = Witness(tmp_path / "witness", log_keys=[key.verifier])
    with SQLiteStore(tmp_path / "one.db") as store:
        record(store, "run-a", 12, key=key)  # seals at 4, 9, 11
        SealLog(store, key=key, witnesses=[witness]).issue()
    with SQLiteStore(tmp_path / "two.db") as store:  # the log again, cut short
        record(store, "run-a", 6, key=key)  # seals at 4, 5
        log = SealLog(store, key=key, witnesses=[witness])
        log.issue()
    assert len(log.witness_errors) == 1
    assert "it holds checkpoint 3, larger than this one (2)" in log.witness_errors[0]


@pytest.fixture
def witness_server(tmp_path: Path) -> tuple[str, str, str, Path]:
    """A ``tacho witness`` process on 127.0.0.1: (url, log vkey, witness vkey, log key file)."""
    key, key_file = make_key(tmp_path / "keys")
    wkey, wkey_file = make_key(tmp_path / "wkeys", "witness.example/w1", witness=True)
    proc, url = start_witness(tmp_path / "wstate", wkey_file, str(key.verifier))
    try:
        yield url, str(key.verifier), str(wkey.verifier), key_file
    finally:
        proc.kill()
        proc.wait()


def test_a_store_rewritten_end_to_end_with_the_same_key_is_caught_by_the_witness(
    tmp_path: Path, witness_server: tuple[str, str, str, Path]
) -> None:
    url, vkey, wvkey, key_file = witness_server
    from tachograph.record.checkpoint import SigningKey

    key = SigningKey.load(key_file)
    db = tmp_path / "store" / "t.db"
    with SQLiteStore(db) as store:
        record(store, "run-a", 12, key=key, witnesses=[HTTPWitness(url)])
    runs = _verdicts(db, "--key", vkey, "--witness", url, "--witness-key", wvkey)
    assert runs["run-a"]["seal"]["status"] == "sealed"
    assert runs["run-a"]["seal"]["witnessed_by"] == ["witness.example/w1"]
    evidence = tmp_path / "ev"
    made = tacho(
        "evidence",
        "run-a",
        "-o",
        str(evidence),
        "--key",
        vkey,
        "--witness",
        url,
        "--witness-key",
        wvkey,
        store=db,
    )
    assert made.exit_code == 0, made.output
    ok = tacho(
        "verify", str(evidence), "--key", vkey, "--witness-key", wvkey, "--min-witnesses", "1"
    )
    assert ok.exit_code == 0, ok.output
    assert "witnessed by witness.example/w1" in ok.output
    # The owner rewrites everything: a new store, other events, sealed and signed with the same
    # key, one run more so that its log is larger. Chains and signatures are all valid.
    os.rename(db, tmp_path / "honest.db")
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    with SQLiteStore(db) as store:
        witness = HTTPWitness(url)
        observer = record(store, "run-a", 12, key=key, witnesses=[witness])
        record(store, "run-b", 6, key=key, witnesses=[witness])
        log = observer.log_for(store, "default")
        refused = log.witness_errors + observer.log_for(store, "default").witness_errors
        assert any("fork" in e or "equivocation" in e for e in refused), refused
    plain = _verdicts(db, "--key", vkey)
    assert plain["run-a"]["seal"]["status"] == "sealed"  # alone, the rewrite looks perfect
    runs = _verdicts(db, "--key", vkey, "--witness", url, "--witness-key", wvkey)
    assert runs["run-a"]["status"] == "failed"
    assert (
        "not consistent with checkpoint 3 that a witness holds" in runs["run-a"]["seal"]["reason"]
    )


def test_two_signed_checkpoints_of_one_size_are_equivocation(tmp_path: Path) -> None:
    key, _ = make_key(tmp_path / "keys")
    witness = Witness(tmp_path / "w", log_keys=[key.verifier])
    first = Checkpoint("log.example/tachograph/default", 3, b"\x01" * 32).note(key)
    second = Checkpoint("log.example/tachograph/default", 3, b"\x02" * 32).note(key)
    witness.add_checkpoint(0, [], first)
    with pytest.raises(WitnessRefused, match="equivocation"):
        witness.add_checkpoint(3, [], second)
    assert Note.parse(second.to_bytes()) == second
    assert SealRow("r", 0, b"x").index == -1


@pytest.mark.parametrize(
    ("tenant", "log_name"),
    [
        ("default\n999\nAAAA", None),
        ("bad tenant", None),
        ("default", "evil\n9"),
        ("default", "a b"),
    ],
)
def test_a_tenant_or_log_name_that_would_add_lines_to_a_checkpoint_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tenant: str, log_name: str | None
) -> None:
    # The origin line is signed as the first line of the note: a newline in it would have
    # the log's key sign a size and a root of the caller's choosing.
    key, key_file = make_key(tmp_path / "keys")
    db = tmp_path / "store" / "t.db"
    with SQLiteStore(db) as store:
        record(store, "run-a", 6, key=None)
        with pytest.raises(SealingError, match=r"seal log|origin"):
            SealLog(store, tenant=tenant, key=key, log_name=log_name)
    if log_name is not None:
        monkeypatch.setenv("TACHOGRAPH_LOG_NAME", log_name)
    result = tacho("seal", "--key-file", str(key_file), "--tenant", tenant, store=db)
    assert result.exit_code == (1 if log_name else 2), result.output
    assert "Traceback" not in result.output
    with SQLiteStore(db) as store:
        assert store.latest_checkpoint(tenant) is None
        assert store.latest_checkpoint("default") is None


def test_a_rewrite_re_signed_under_another_log_name_is_caught_by_the_witness(
    tmp_path: Path, witness_server: tuple[str, str, str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The owner rewrites a sealed run and signs the new seal log with the same key under
    # another origin ("evil.example/tachograph/default"), which the witness takes as a new log
    # from size 0. The verifier asks the witness for the log it knows: its checkpoint of the
    # old origin must still be held to the store's seals.
    url, vkey, wvkey, key_file = witness_server
    from tachograph.record.checkpoint import SigningKey

    key = SigningKey.load(key_file)
    db = tmp_path / "store" / "t.db"
    with SQLiteStore(db) as store:
        record(store, "run-a", 12, key=key, witnesses=[HTTPWitness(url)])
    assert _verdicts(db, "--key", vkey, "--witness", url, "--witness-key", wvkey)["run-a"]["seal"][
        "witnessed_by"
    ] == ["witness.example/w1"]
    os.rename(db, tmp_path / "honest.db")
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    monkeypatch.setenv("TACHOGRAPH_LOG_NAME", "evil.example")
    with SQLiteStore(db) as store:
        observer = record(store, "run-a", 12, key=key, witnesses=[HTTPWitness(url)])
        assert observer.log_for(store, "default").witness_errors == []  # a new log to it
    monkeypatch.delenv("TACHOGRAPH_LOG_NAME")
    assert _verdicts(db, "--key", vkey)["run-a"]["seal"]["status"] == "sealed"  # alone
    runs = _verdicts(db, "--key", vkey, "--witness", url, "--witness-key", wvkey)
    assert runs["run-a"]["status"] == "failed", runs["run-a"]
    reason = str(runs["run-a"]["seal"]["reason"])
    assert "equivocation" in reason or "not consistent" in reason, reason


def test_a_seal_that_contradicts_the_log_is_refused(tmp_path: Path) -> None:
    # An owner who rewrote a finished run could append a second final seal of it: the log
    # would then prove both, and an evidence bundle shows one. The log refuses it.
    key, _ = make_key(tmp_path / "keys")
    db = tmp_path / "store" / "t.db"
    with SQLiteStore(db) as store:
        record(store, "run-a", 12, key=key)  # sealed at 4, 9 and final at 11
        held = store.seal_count("default")
        final = SealLeaf.from_bytes(store.seals_for_run("default", "run-a")[-1].leaf)
        assert final.final
        log = SealLog(store, tenant="default", key=key)
        other = "sha256:" + "ab" * 32
        for leaf in (
            SealLeaf("default", "run-a", final.seq, other, True),  # the rewritten end
            SealLeaf("default", "run-a", final.seq + 3, other, True),  # a longer rewrite
            SealLeaf("default", "run-a", 4, other, False),  # another hash at a sealed seq
        ):
            with pytest.raises(SealingError, match="run-a"):
                log.seal([leaf])
        assert store.seal_count("default") == held
        log.seal([final])  # the same seal again is no contradiction


@pytest.mark.parametrize("wipe", ["tenant", "store"])
def test_a_tenant_wiped_with_its_seals_is_caught_by_a_witness_that_lists_its_logs(
    tmp_path: Path, witness_server: tuple[str, str, str, Path], wipe: str
) -> None:
    # The owner removes every trace of a tenant: its runs, seals and checkpoints. The store
    # then names no such tenant, and a verifier asked only the witness about the tenants the
    # store names; the witness lists every log it holds.
    url, vkey, _wvkey, key_file = witness_server
    from tachograph.record.checkpoint import SigningKey

    key = SigningKey.load(key_file)
    db = tmp_path / "store" / "t.db"
    with SQLiteStore(db) as store:
        record(store, "run-a", 8, key=key, witnesses=[HTTPWitness(url)])
        record(store, "run-b", 8, key=key, witnesses=[HTTPWitness(url)], tenant="acme")
    honest = tacho("verify", "--json", "--key", vkey, "--witness", url, store=db)
    assert honest.exit_code == 0, honest.output
    raw = _raw(db)
    for trigger in ("runs_append_only_delete", "checkpoints_append_only_delete"):
        raw.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    doomed = ("acme",) if wipe == "tenant" else ("acme", "default")
    for tenant in doomed:
        raw.execute(
            "DELETE FROM payloads WHERE id IN (SELECT id FROM events WHERE tenant=?)", (tenant,)
        )
        for table in ("events", "runs", "seals", "checkpoints"):
            raw.execute(f"DELETE FROM {table} WHERE tenant=?", (tenant,))
    raw.close()
    result = tacho("verify", "--json", "--key", vkey, "--witness", url, store=db)
    data = json.loads(result.output)
    assert result.exit_code == 1, result.output
    problems = {p["tenant"]: p["problem"] for p in data["seal_logs"]}
    assert set(problems) == set(doomed), problems
    assert "larger than the store's latest (none)" in problems["acme"]
    # without the witness nothing shows it: the documented limit of a store alone
    assert tacho("verify", "--key", vkey, store=db).exit_code == 0
