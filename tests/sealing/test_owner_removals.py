"""What the store's owner removes behind the seal log: whole runs, the seals' index, the
checkpoints a witness still holds. Each is caught by ``tacho verify``."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tachograph.record.checkpoint import SigningKey
from tachograph.sealing import HTTPWitness
from tachograph.store import SQLiteStore
from tachograph.store.audit import AuditEntry

from .helpers import make_key, record, start_witness, tacho


def _verify(db: Path, *args: str) -> dict[str, object]:
    result = tacho("verify", "--json", *args, store=db)
    data: dict[str, object] = json.loads(result.output)
    assert result.exit_code == (0 if data["ok"] else 1)
    return data


def _by_run(data: dict[str, object]) -> dict[str, dict[str, object]]:
    runs = data["runs"]
    assert isinstance(runs, list)
    return {run["run_id"]: run for run in runs}


def _owner(db: Path) -> sqlite3.Connection:
    """The owner's own connection, with every append-only trigger dropped."""
    raw = sqlite3.connect(db, isolation_level=None)
    names = [r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='trigger'")]
    for name in names:
        raw.execute(f'DROP TRIGGER "{name}"')
    return raw


def _delete_run(raw: sqlite3.Connection, run_id: str) -> None:
    raw.execute(
        "DELETE FROM payloads WHERE id IN (SELECT id FROM events WHERE run_id=?)", (run_id,)
    )
    raw.execute("DELETE FROM events WHERE run_id=?", (run_id,))
    raw.execute("DELETE FROM runs WHERE run_id=?", (run_id,))


@pytest.mark.parametrize("victim", ["run-b", "run-c"])
def test_a_sealed_run_deleted_by_the_owner_fails_every_run_of_its_tenant(
    tmp_path: Path, victim: str
) -> None:
    key, _ = make_key(tmp_path / "keys")
    db = tmp_path / "t.db"
    with SQLiteStore(db) as store:
        for run_id in ("run-a", "run-b", "run-c"):
            record(store, run_id, 8, key=key)
    assert _verify(db, "--key", str(key.verifier))["ok"] is True
    raw = _owner(db)
    _delete_run(raw, victim)  # the middle run or the last one
    raw.close()
    data = _verify(db, "--key", str(key.verifier))
    assert data["ok"] is False
    runs = _by_run(data)
    assert victim not in runs
    for run in runs.values():
        seal = run["seal"]
        assert isinstance(seal, dict)
        assert seal["status"] == "failed"
        assert f"run '{victim}', sealed up to seq 7, is not in the store" in seal["reason"]
        assert "the store audit records no deletion of it" in seal["reason"]
    # without a key the stored seals alone still show it
    assert _verify(db)["ok"] is False
    doctor = tacho("doctor", store=db)
    assert victim in doctor.output


def test_a_run_deleted_by_retention_leaves_its_seals_without_a_failure(tmp_path: Path) -> None:
    key, _ = make_key(tmp_path / "keys")
    db = tmp_path / "t.db"
    with SQLiteStore(db) as store:
        record(store, "run-a", 8, key=key)
        record(store, "run-b", 8, key=key)
        entry = AuditEntry(action="retention.delete", actor="test", detail={"reason": "window"})
        assert store.delete_run("default", "run-b", audit=entry) == 8
    data = _verify(db, "--key", str(key.verifier))
    assert data["ok"] is True
    assert _by_run(data)["run-a"]["seal"]["status"] == "sealed"  # type: ignore[index]


def test_a_run_rewritten_with_its_seals_refiled_under_another_name_is_caught(
    tmp_path: Path,
) -> None:
    key, _ = make_key(tmp_path / "keys")
    db = tmp_path / "t.db"
    with SQLiteStore(db) as store:
        record(store, "run-a", 8, key=key)
        record(store, "run-b", 8, key=key)
    raw = _owner(db)
    # the leaves stay byte for byte (so the signed root still matches); only the index the
    # store finds a run's seals by is changed, which would leave run-a "unsealed"
    raw.execute("UPDATE seals SET run_id='ghost' WHERE run_id='run-a'")
    raw.close()
    data = _verify(db, "--key", str(key.verifier))
    assert data["ok"] is False
    seal = _by_run(data)["run-a"]["seal"]
    assert isinstance(seal, dict)
    assert seal["status"] == "failed"
    assert "is filed under run 'ghost' seq" in seal["reason"]
    assert "but is for run 'run-a'" in seal["reason"]


@pytest.fixture
def witnessed(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A store of three sealed runs whose checkpoint a ``tacho witness`` process holds:
    (db, url, log verifier key, witness verifier key)."""
    key, key_file = make_key(tmp_path / "keys")
    wkey, wkey_file = make_key(tmp_path / "wkeys", "witness.example/w1", witness=True)
    proc, url = start_witness(tmp_path / "wstate", wkey_file, str(key.verifier))
    try:
        db = tmp_path / "t.db"
        signing = SigningKey.load(key_file)
        with SQLiteStore(db) as store:
            for run_id in ("run-a", "run-b", "run-c"):
                record(store, run_id, 8, key=signing, witnesses=[HTTPWitness(url)])
        yield db, url, str(key.verifier), str(wkey.verifier)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("dropped", ["checkpoints", "checkpoints and seals"])
def test_dropping_the_checkpoints_a_witness_holds_is_caught(witnessed, dropped: str) -> None:  # type: ignore[no-untyped-def]
    db, url, vkey, wvkey = witnessed
    args = ("--key", vkey, "--witness", url, "--witness-key", wvkey)
    assert _verify(db, *args)["ok"] is True
    raw = _owner(db)
    raw.execute("DELETE FROM checkpoints")
    if dropped == "checkpoints and seals":
        raw.execute("DELETE FROM seals")
    raw.close()
    data = _verify(db, *args)
    assert data["ok"] is False
    seal = _by_run(data)["run-a"]["seal"]
    assert isinstance(seal, dict)
    assert "larger than the store's latest (none)" in seal["reason"]
    # the witness key alone vouches for the witness's checkpoint: no log key needed
    assert _verify(db, "--witness", url, "--witness-key", wvkey)["ok"] is False


def test_without_a_log_key_the_witness_still_holds_the_store_to_its_checkpoint(
    witnessed,  # type: ignore[no-untyped-def]
) -> None:
    db, url, _vkey, wvkey = witnessed
    with sqlite3.connect(db) as con:
        latest = con.execute("SELECT max(size) FROM checkpoints").fetchone()[0]
    data = _verify(db, "--witness", url, "--witness-key", wvkey)
    assert data["ok"] is True
    seal = _by_run(data)["run-a"]["seal"]
    assert isinstance(seal, dict)
    assert seal["status"] == "unsigned"
    assert f"the stored seals match the witnessed checkpoint(s) of size {latest}" in seal["reason"]
    # The owner cuts the log back by one seal and re-signs nothing: the store's latest
    # checkpoint is now older than the witness's.
    raw = _owner(db)
    raw.execute("DELETE FROM checkpoints WHERE size=?", (latest,))
    raw.close()
    data = _verify(db, "--witness", url, "--witness-key", wvkey)
    assert data["ok"] is False
    seal = _by_run(data)["run-a"]["seal"]
    assert isinstance(seal, dict)
    assert f"a witness holds checkpoint {latest}, larger than the store's latest" in seal["reason"]
    # and with neither key, verify says the witness was not checked rather than staying silent
    data = _verify(db, "--witness", url)
    seal = _by_run(data)["run-a"]["seal"]
    assert isinstance(seal, dict)
    assert "the witnesses' checkpoints were not checked" in seal["reason"]


def test_every_run_of_a_tenant_deleted_by_the_owner_is_caught_by_the_whole_store_verify(
    tmp_path: Path,
) -> None:
    key, _ = make_key(tmp_path / "keys")
    db = tmp_path / "t.db"
    with SQLiteStore(db) as store:
        record(store, "run-a", 8, key=key)
        record(store, "run-b", 8, key=key, tenant="acme")
    raw = _owner(db)
    _delete_run(raw, "run-b")  # acme's only run: no verified run is left to fail
    raw.close()
    data = _verify(db, "--key", str(key.verifier))
    assert data["ok"] is False
    assert list(_by_run(data)) == ["run-a"]
    logs = data["seal_logs"]
    assert isinstance(logs, list)
    assert len(logs) == 1
    assert logs[0]["tenant"] == "acme"
    assert "run 'run-b', sealed up to seq 7, is not in the store" in logs[0]["problem"]
    text = tacho("verify", "--key", str(key.verifier), store=db)
    assert text.exit_code == 1
    assert "seal log of tenant acme: SEAL FAILED: run 'run-b'" in text.output
    # a store emptied of every run fails too, instead of being "merely empty"
    raw = _owner(db)
    _delete_run(raw, "run-a")
    raw.close()
    emptied = tacho("verify", str(db))
    assert emptied.exit_code == 1
    assert "seal log of tenant default: SEAL FAILED" in emptied.output


def test_evidence_of_a_tampered_or_seal_failed_run_is_written_but_named(tmp_path: Path) -> None:
    key, _ = make_key(tmp_path / "keys")
    db = tmp_path / "t.db"
    with SQLiteStore(db) as store:
        record(store, "run-a", 8, key=key)
        record(store, "run-b", 8, key=key)
    good = tacho("evidence", "run-a", "-o", str(tmp_path / "ok"), "--key", str(key.verifier),
                 "--json", store=db)  # fmt: skip
    assert good.exit_code == 0, good.output
    assert json.loads(good.stdout)["ok"] is True
    raw = _owner(db)
    # run-a: a payload changed (the chain shows it); run-b: its tail cut with the summary
    # rewritten to match (only its seals show it)
    raw.execute(
        "UPDATE payloads SET body=CAST('{\"forged\":1}' AS BLOB) WHERE id="
        "(SELECT id FROM events WHERE run_id='run-a' AND seq=3)"
    )
    last = raw.execute("SELECT max(seq) FROM events WHERE run_id='run-b'").fetchone()[0]
    raw.execute(
        "DELETE FROM payloads WHERE id=(SELECT id FROM events WHERE run_id='run-b' AND seq=?)",
        (last,),
    )
    raw.execute("DELETE FROM events WHERE run_id='run-b' AND seq=?", (last,))
    head = raw.execute(
        "SELECT hash FROM events WHERE run_id='run-b' AND seq=?", (last - 1,)
    ).fetchone()[0]
    raw.execute("UPDATE runs SET events=?, head_hash=? WHERE run_id='run-b'", (last, head))
    raw.close()
    for run_id, named in (("run-a", "TAMPERED"), ("run-b", "SEAL FAILED")):
        out = tmp_path / run_id
        made = tacho("evidence", run_id, "-o", str(out), "--key", str(key.verifier), store=db)
        assert made.exit_code == 1, made.output
        assert named in made.stderr
        assert (out / "run.jsonl").exists()  # written all the same: it is the evidence
        as_json = tacho("evidence", run_id, "-o", str(tmp_path / f"{run_id}-j"), "--key",
                        str(key.verifier), "--json", store=db)  # fmt: skip
        data = json.loads(as_json.stdout)
        assert data["ok"] is False
        assert data["problems"][0].startswith(named)


@pytest.mark.parametrize("change", ["other checkpoint", "missing"])
def test_an_evidence_folder_whose_checkpoint_file_is_not_the_proofs_fails(
    tmp_path: Path, change: str
) -> None:
    key, _ = make_key(tmp_path / "keys")
    db = tmp_path / "t.db"
    with SQLiteStore(db) as store:
        record(store, "run-a", 8, key=key)
    out = tmp_path / "ev"
    made = tacho("evidence", "run-a", "-o", str(out), "--key", str(key.verifier), store=db)
    assert made.exit_code == 0, made.output
    ok = tacho("verify", str(out), "--key", str(key.verifier), "--json")
    assert json.loads(ok.stdout)["ok"] is True
    kept = out / "checkpoint"
    if change == "missing":
        kept.unlink()
    else:
        from tachograph.record.checkpoint import Checkpoint, Note

        proven = Checkpoint.parse(Note.parse(kept.read_bytes()).text)
        forged = Checkpoint(proven.origin, proven.size, b"\x07" * 32).note(key)
        kept.write_bytes(forged.to_bytes())
    bad = tacho("verify", str(out), "--key", str(key.verifier), "--json")
    assert bad.exit_code == 1
    data = json.loads(bad.stdout)
    assert data["ok"] is False
    assert data["failed_check"] == "signature"
    assert "checkpoint" in data["message"]


def _verdict_steps(db: Path, key: SigningKey) -> int:
    """SQLite virtual-machine steps taken by the seal audit of one tenant."""
    from tachograph.sealing.log import audit_tenant

    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    with SQLiteStore(db) as store:
        store._db.set_progress_handler(count, 1)
        audit = audit_tenant(store, "default", keys=[key.verifier])
        store._db.set_progress_handler(None, 1)
    assert audit.problem is None
    assert audit.size is not None
    return steps


def test_the_seal_audit_of_a_tenant_does_not_read_every_event_of_the_store(
    tmp_path: Path,
) -> None:
    # the same runs and seals, 10 or 400 events each: only the events may differ in cost
    key, _ = make_key(tmp_path / "keys")
    steps = {}
    for length in (10, 400):
        db = tmp_path / f"{length}.db"
        with SQLiteStore(db) as store:
            for i in range(6):
                record(store, f"run-{i}", length, key=key, every=10_000)
        steps[length] = _verdict_steps(db, key)
    assert steps[400] < 1.5 * steps[10], steps


def test_a_sealed_run_whose_summary_row_is_gone_is_still_held_by_its_events(
    tmp_path: Path,
) -> None:
    from tachograph.sealing.log import audit_tenant

    key, _ = make_key(tmp_path / "keys")
    db = tmp_path / "t.db"
    with SQLiteStore(db) as store:
        for run_id in ("run-a", "run-b"):
            record(store, run_id, 8, key=key)
    raw = _owner(db)
    raw.execute("DELETE FROM runs WHERE run_id='run-b'")  # an orphan: events, no summary
    raw.close()
    with SQLiteStore(db) as store:
        assert audit_tenant(store, "default", keys=[key.verifier]).problem is None
    raw = _owner(db)
    _delete_run(raw, "run-b")  # now the events too: the seals name a run that is gone
    raw.close()
    with SQLiteStore(db) as store:
        problem = audit_tenant(store, "default", keys=[key.verifier]).problem
    assert problem is not None
    assert "'run-b'" in problem
    assert "removed" in problem
