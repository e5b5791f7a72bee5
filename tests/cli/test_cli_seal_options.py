"""The sealing side of the command line says what it did and refuses what it cannot do.

``verify`` refuses an option that would have no effect on its target (an evidence folder, a
JSONL file, a store) rather than ignore it, and holds a store's runs to ``--min-witnesses``
through the witnesses it consults (a real ``tacho witness`` process); ``keys init`` finds the
store's folder however the store is named; ``seal`` signs nothing for a tenant with nothing
to seal; ``state`` and ``diff`` give a run whose seal fails the status ``verify`` gives it;
a checkpoint whose signature line names the trusted key with another key id is not said to
be signed by that key. Real SQLite stores, the real CLI, no mocks.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sealing.helpers import make_key, record, start_witness, tacho
from tachograph.record.checkpoint import Note, NoteSignature, SigningKey
from tachograph.sealing import SealLog
from tachograph.store import SQLiteStore


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TACHOGRAPH_STORE", "TACHOGRAPH_SIGNING_KEY", "TACHOGRAPH_LOG_NAME"):
        monkeypatch.delenv(name, raising=False)


@dataclass
class Sealed:
    db: Path
    key: SigningKey
    key_file: Path
    tmp: Path

    @property
    def vkey(self) -> str:
        return str(self.key.verifier)


@pytest.fixture
def sealed(tmp_path: Path) -> Sealed:
    """A store of three finished runs, sealed and checkpointed as they were recorded."""
    key, key_file = make_key(tmp_path / "keys")
    db = tmp_path / "store" / "s.db"
    with SQLiteStore(db) as store:
        for run in ("r1", "r2", "r3"):
            record(store, run, 6, key=key)
    return Sealed(db, key, key_file, tmp_path)


# D5. verify refuses the options that do not apply to its target


def _evidence(s: Sealed) -> Path:
    folder = s.tmp / "evidence"
    made = tacho("evidence", "r1", "-o", str(folder), "--key", s.vkey, store=s.db)
    assert made.exit_code == 0, made.output
    return folder


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--witness", "http://127.0.0.1:1"], "--witness does not apply to an evidence folder"),
        (["--workers", "4"], "--workers does not apply to an evidence folder"),
        (["--tenant", "zz"], "--tenant does not apply to an evidence folder"),
    ],
)
def test_an_evidence_folder_refuses_each_option_that_has_no_effect(
    sealed: Sealed, extra: list[str], named: str
) -> None:
    folder = _evidence(sealed)
    assert tacho("verify", str(folder), "--key", sealed.vkey).exit_code == 0
    refused = tacho("verify", str(folder), "--key", sealed.vkey, *extra)
    assert refused.exit_code == 2, refused.output
    assert named in refused.stderr


def test_the_reviewers_evidence_command_line_is_a_usage_error(sealed: Sealed) -> None:
    # was: exit 0, and the witness (nothing listens on port 1) never contacted
    folder = _evidence(sealed)
    result = tacho(
        "verify",
        str(folder),
        "--key",
        sealed.vkey,
        "--witness",
        "http://127.0.0.1:1",
        "--tenant",
        "zz",
        "--workers",
        "4",
    )
    assert result.exit_code == 2
    assert "does not apply to an evidence folder" in result.stderr
    assert "verified" not in result.stdout


def test_min_witnesses_in_an_evidence_folder_needs_a_witness_key(sealed: Sealed) -> None:
    folder = _evidence(sealed)
    result = tacho("verify", str(folder), "--key", sealed.vkey, "--min-witnesses", "1")
    assert result.exit_code == 2
    assert "--min-witnesses counts cosignatures by trusted witness keys" in result.stderr


@pytest.mark.parametrize(
    "extra",
    [
        ["--key", "KEY"],
        ["--witness", "http://127.0.0.1:1"],
        ["--witness-key", "KEY"],
        ["--min-witnesses", "1"],
        ["--workers", "2"],
        ["--tenant", "zz"],
    ],
)
def test_a_jsonl_file_refuses_the_sealing_and_store_options(
    sealed: Sealed, extra: list[str]
) -> None:
    exported = sealed.tmp / "r1.jsonl"
    assert tacho("export", "r1", "-o", str(exported), store=sealed.db).exit_code == 0
    assert tacho("verify", str(exported)).exit_code == 0
    extra = [sealed.vkey if v == "KEY" else v for v in extra]
    refused = tacho("verify", str(exported), *extra)
    assert refused.exit_code == 2, refused.output
    assert f"{extra[0]} does not apply to a JSONL file" in refused.stderr


def test_a_store_file_refuses_tenant(sealed: Sealed) -> None:
    refused = tacho("verify", str(sealed.db), "--tenant", "default")
    assert refused.exit_code == 2
    assert "--tenant does not apply to a store file" in refused.stderr


def test_min_witnesses_on_a_store_without_a_witness_is_a_usage_error(sealed: Sealed) -> None:
    # was: "3 of 3 run(s) verified", exit 0: no cosignature counted, none asked for
    wkey, _ = make_key(sealed.tmp / "wkeys", "witness.example/w1", witness=True)
    for extra in ([], ["--witness-key", str(wkey.verifier)]):
        result = tacho(
            "verify", "--key", sealed.vkey, "--min-witnesses", "2", *extra, store=sealed.db
        )
        assert result.exit_code == 2, result.output
        assert "--min-witnesses needs --witness (and --witness-key) for a store" in result.stderr
        assert "run(s) verified" not in result.stdout
    lone = tacho(
        "verify", "--key", sealed.vkey, "--witness-key", str(wkey.verifier), store=sealed.db
    )
    assert lone.exit_code == 2
    assert "--witness-key needs --witness for a store" in lone.stderr


@pytest.fixture
def witness(sealed: Sealed) -> Iterator[tuple[str, SigningKey]]:
    """A ``tacho witness`` process trusting the store's log key: (its URL, its key)."""
    wkey, wkey_file = make_key(sealed.tmp / "wkeys", "witness.example/w1", witness=True)
    proc, url = start_witness(sealed.tmp / "wstate", wkey_file, sealed.vkey)
    try:
        yield url, wkey
    finally:
        proc.kill()
        proc.wait()


def test_min_witnesses_on_a_store_counts_the_witnesses_cosignatures(
    sealed: Sealed, witness: tuple[str, SigningKey]
) -> None:
    url, wkey = witness
    pushed = tacho("seal", "--key-file", str(sealed.key_file), "--witness", url, store=sealed.db)
    assert pushed.exit_code == 0, pushed.output
    keyless = ("--key", sealed.vkey, "--witness", url, "--min-witnesses", "1")
    refused = tacho("verify", *keyless, store=sealed.db)
    assert refused.exit_code == 2  # no witness key to count cosignatures by
    assert "--min-witnesses counts cosignatures by trusted witness keys" in refused.stderr
    policy = ("--key", sealed.vkey, "--witness", url, "--witness-key", str(wkey.verifier))
    one = tacho("verify", *policy, "--min-witnesses", "1", "--json", store=sealed.db)
    assert one.exit_code == 0, one.output
    runs = {r["run_id"]: r for r in json.loads(one.stdout)["runs"]}
    assert {r["seal"]["witnessed_by"][0] for r in runs.values()} == {wkey.name}
    # Two cosignatures asked for, one witness: every run fails, saying so.
    two = tacho("verify", *policy, "--min-witnesses", "2", "--json", store=sealed.db)
    assert two.exit_code == 1
    data = json.loads(two.stdout)
    assert data["ok"] is False
    assert data["failed"] == 3
    for run in data["runs"]:
        assert run["status"] == "failed"
        assert run["seal"]["status"] == "failed"
        assert run["seal"]["reason"].startswith(
            f"1 witness(es) ({wkey.name}) cosigned a checkpoint covering its seal at seq 5; "
            "--min-witnesses asks for 2"
        )
    text = tacho("verify", *policy, "--min-witnesses", "2", store=sealed.db)
    assert text.exit_code == 1
    assert "0 of 3 run(s) verified, 3 FAILED" in text.stdout
    # A run sealed after the witness's checkpoint is not vouched for by it.
    with SQLiteStore(sealed.db) as store:
        record(store, "r4", 6, key=sealed.key)
    later = tacho("verify", *policy, "--min-witnesses", "1", "--json", store=sealed.db)
    assert later.exit_code == 1
    runs = {r["run_id"]: r for r in json.loads(later.stdout)["runs"]}
    assert [r for r, v in runs.items() if v["status"] == "failed"] == ["r4"]
    assert "0 witness(es) cosigned a checkpoint covering its seal" in runs["r4"]["seal"]["reason"]


# D8. keys init finds the store's folder however the store is named


@pytest.mark.parametrize("form", ["sqlite://{}", "sqlite:///{}", "sqlite://{}?tenant=acme", "{}"])
def test_keys_init_refuses_a_key_inside_the_folder_of_a_store_given_as_a_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    db = tmp_path / "t" / "base.db"
    SQLiteStore(db).close()
    work = tmp_path / "elsewhere"
    work.mkdir()
    monkeypatch.chdir(work)  # no ./tmp here: sqlite:///tmp/... is the absolute /tmp/...
    inside = db.parent / "inside.key"
    for via_env in (False, True):
        if via_env:
            monkeypatch.setenv("TACHOGRAPH_STORE", form.format(db))
            result = tacho("keys", "init", "-o", str(inside))
        else:
            monkeypatch.delenv("TACHOGRAPH_STORE", raising=False)
            result = tacho("--store", form.format(db), "keys", "init", "-o", str(inside))
        assert result.exit_code == 2, (form, result.output)
        assert "inside the store's folder" in result.stderr
        assert not inside.exists()
    monkeypatch.delenv("TACHOGRAPH_STORE")
    apart = tmp_path / "keys" / "log.key"
    made = tacho("--store", form.format(db), "keys", "init", "-o", str(apart))
    assert made.exit_code == 0, made.output
    assert apart.exists()


# D9. seal signs nothing for a tenant with nothing to seal


def test_seal_refuses_a_tenant_with_no_seal_and_keeps_nothing(sealed: Sealed) -> None:
    result = tacho(
        "seal", "--key-file", str(sealed.key_file), "--tenant", "TYPO", "--json", store=sealed.db
    )
    assert result.exit_code == 3, result.output
    assert result.stdout == ""
    assert "tenant 'TYPO' has no seal and no checkpoint in this store" in result.stderr
    assert "the store holds no run of it" in result.stderr
    with SQLiteStore(sealed.db) as store:
        assert store.latest_checkpoint("TYPO") is None
    raw = sqlite3.connect(sealed.db)
    assert raw.execute("SELECT count(*) FROM checkpoints WHERE tenant='TYPO'").fetchone() == (0,)
    raw.close()
    # the tenant that has seals is sealed as before
    again = tacho("seal", "--key-file", str(sealed.key_file), "--json", store=sealed.db)
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["issued"] is False


def test_seal_refuses_a_tenant_whose_runs_have_no_seal(tmp_path: Path) -> None:
    _, key_file = make_key(tmp_path / "keys")
    db = tmp_path / "store" / "s.db"
    with SQLiteStore(db) as store:
        record(store, "plain", 4, key=None, every=100, finish=False)  # before its first seal
    result = tacho("seal", "--key-file", str(key_file), store=db)
    assert result.exit_code == 3
    assert "its runs have no seal" in result.stderr
    with SQLiteStore(db) as store:
        assert store.latest_checkpoint("default") is None


def test_a_first_checkpoint_of_an_empty_log_is_reported_as_issued(tmp_path: Path) -> None:
    key, _ = make_key(tmp_path / "keys")
    with SQLiteStore(tmp_path / "e.db") as store:
        log = SealLog(store, tenant="empty", key=key)
        log.issue()
        assert log.issued_new is True  # it was signed and kept now
        row = store.latest_checkpoint("empty")
        assert row is not None
        assert row.size == 0
        again = SealLog(store, tenant="empty", key=key)
        again.issue()
        assert again.issued_new is False  # the latest, returned


# D10. state and diff give a run whose seal fails the status verify gives it


def _cut_tail(db: Path) -> None:
    """Cut run r1's tail (seq 4..) after it was sealed, and make its summary agree: the
    chain alone then verifies."""
    raw = sqlite3.connect(db, isolation_level=None)
    for trigger in ("events_append_only_delete", "payloads_no_delete"):
        raw.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    head = raw.execute("SELECT hash FROM events WHERE run_id='r1' AND seq=3").fetchone()[0]
    raw.execute(
        "DELETE FROM payloads WHERE id IN (SELECT id FROM events WHERE run_id='r1' AND seq>=4)"
    )
    raw.execute("DELETE FROM events WHERE run_id='r1' AND seq>=4")
    raw.execute("UPDATE runs SET events=4, head_hash=? WHERE run_id='r1'", (head,))
    raw.close()


def test_state_and_diff_report_a_failed_seal_as_verify_does(
    sealed: Sealed, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cut_tail(sealed.db)
    monkeypatch.setenv("TACHOGRAPH_SIGNING_KEY", str(sealed.key_file))
    verified = tacho("verify", "r1", "--json", store=sealed.db)
    assert verified.exit_code == 1
    (run,) = json.loads(verified.stdout)["runs"]
    assert run["status"] == "failed"
    assert run["first_failure"] is None  # the chain verifies: the seal fails
    state = tacho("state", "r1", "--at", "2", "--json", store=sealed.db)
    assert state.exit_code == 1
    data = json.loads(state.stdout)
    assert data["seal"]["status"] == "failed"
    assert data["verification"]["status"] == "failed"  # was "verified"
    assert data["verification"]["sealed"] is False
    diff = tacho("diff", "r1", "r2", "--json", store=sealed.db)
    assert diff.exit_code == 1
    check = json.loads(diff.stdout)["verification"]
    assert check["ok"] is False
    assert check["seal_a"]["status"] == "failed"
    assert check["run_a"]["status"] == "failed"  # was "verified"
    assert check["run_b"]["status"] == "verified"
    assert check["run_b"]["sealed"] is True  # signed by the trusted key in force
    intact = json.loads(tacho("state", "r2", "--json", store=sealed.db).stdout)
    assert intact["verification"]["status"] == "verified"
    assert intact["verification"]["sealed"] is True
    shown = tacho("show", "r1", "--json", store=sealed.db)
    assert shown.exit_code == 1
    data = json.loads(shown.stdout)
    assert data["seal"]["status"] == "failed"
    assert data["verification"]["status"] == "failed"  # was "verified"


# D11. a signature line with another key id is not the trusted key's


def test_a_checkpoint_whose_key_id_was_changed_is_not_said_signed_by_the_trusted_key(
    sealed: Sealed,
) -> None:
    raw = sqlite3.connect(sealed.db, isolation_level=None)
    raw.execute("DROP TRIGGER checkpoints_append_only_update")
    size, text = raw.execute(
        "SELECT size, note FROM checkpoints ORDER BY size DESC LIMIT 1"
    ).fetchone()
    note = Note.parse(text)
    (sig,) = note.signatures
    other = bytes([sig.key_id[0] ^ 0xFF]) + sig.key_id[1:]
    forged = Note(note.text, (NoteSignature(sig.name, other, sig.signature),))
    raw.execute("UPDATE checkpoints SET note=? WHERE size=?", (forged.to_bytes().decode(), size))
    raw.close()
    result = tacho("verify", "--key", sealed.vkey, "--json", store=sealed.db)
    assert result.exit_code == 1
    reason = json.loads(result.stdout)["runs"][0]["seal"]["reason"]
    assert f"is signed by {sealed.key.name}" not in reason
    assert reason == (
        f"checkpoint {size} carries no signature by a trusted key: the signature line named "
        f"{sealed.key.name} carries key id {other.hex()}, not the id of the trusted key of that "
        f"name ({sealed.key.verifier.key_id.hex()}): it matches no trusted key"
    )
    # a checkpoint signed by another key altogether names that key as no trusted one
    stranger, _ = make_key(sealed.tmp / "k2", "stranger.example/tachograph")
    named = tacho("verify", "--key", str(stranger.verifier), "--json", store=sealed.db)
    assert named.exit_code == 1
    assert "matches no trusted key" in json.loads(named.stdout)["runs"][0]["seal"]["reason"]


# D13. docs/cli.md gives one shape for tacho evidence --json, the one it prints


def test_every_json_shape_the_evidence_section_documents_is_the_one_printed(
    sealed: Sealed,
) -> None:
    made = tacho(
        "evidence", "r1", "-o", str(sealed.tmp / "ev"), "--key", sealed.vkey, "--json",
        store=sealed.db,
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    printed = set(json.loads(made.stdout))
    docs = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    section = docs.split("### `tacho evidence`", 1)[1].split("\n### ", 1)[0]
    shapes = re.findall(r"`(\{\"run_id\"[^`]*\})`", section)
    assert len(shapes) >= 2  # the prose and the option table
    for shape in shapes:
        assert set(re.findall(r'"([a-z_]+)"', shape)) == printed, shape
