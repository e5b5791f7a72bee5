"""Evidence bundles: an honest one verifies offline; every forgery is caught and named."""

from __future__ import annotations

import base64
import io
import json
import shutil
from pathlib import Path

import pytest

from tachograph.record.checkpoint import Checkpoint, Note, TlogProof, VerifierKey
from tachograph.record.event import new_event
from tachograph.record.jsonl import write_events
from tachograph.sealing import verify_evidence
from tachograph.store import SQLiteStore

from .helpers import lines_of, make_key, record, rehash, tacho


@pytest.fixture
def bundle(tmp_path: Path) -> tuple[Path, str, Path]:
    """An evidence folder of a finished, sealed run; its verifier key; the store."""
    key, _ = make_key(tmp_path)
    db = tmp_path / "store" / "t.db"
    with SQLiteStore(db) as store:
        record(store, "run-a", 12, key=key)
        record(store, "run-b", 7, key=key)
    out = tmp_path / "evidence-a"
    vkey = str(key.verifier)
    result = tacho("evidence", "run-a", "-o", str(out), "--key", vkey, store=db)
    assert result.exit_code == 0, result.output
    return out, vkey, db


def _verify(folder: Path, vkey: str) -> dict[str, object]:
    result = tacho("verify", str(folder), "--key", vkey, "--json")
    data = json.loads(result.output)
    assert result.exit_code == (0 if data["ok"] else 1)
    return data


def test_an_honest_bundle_verifies_with_nothing_but_the_folder(
    bundle: tuple[Path, str, Path],
) -> None:
    folder, vkey, _ = bundle
    assert sorted(p.name for p in folder.iterdir()) == [
        "checkpoint",
        "run.jsonl",
        "run.tlog-proof",
        "verifier.keys",
    ]
    assert (folder / "verifier.keys").read_text() == vkey + "\n"
    data = _verify(folder, vkey)
    assert data["ok"] is True
    assert data["sealed_seq"] == 11
    assert data["checkpoint_size"] == 5  # run-a: seals at 4, 9, 11; run-b: 4, 6
    text = tacho("verify", str(folder), "--key", vkey).output
    assert "sealed up to seq 11" in text


def test_without_a_trusted_key_nothing_is_vouched_for(bundle: tuple[Path, str, Path]) -> None:
    folder, _, _ = bundle
    other, _ = make_key(folder.parent / "other-keys", "log.example/tachograph")
    data = _verify(folder, str(other.verifier))
    assert data["failed_check"] == "signature"


def _tamper_run(folder: Path, edit: str) -> None:
    lines = lines_of(folder / "run.jsonl")
    if edit == "insert":
        lines.insert(3, dict(lines[2], payload={"name": "forged", "chosen": 0}))
    elif edit == "replace":
        lines[5] = dict(lines[5], payload={"name": "step", "chosen": 999})
    elif edit == "append":  # the forger keeps every line and chains one more after the end
        extra = new_event(
            run_id=lines[-1]["run_id"],
            seq=len(lines),
            type="decision",
            actor="agent",
            payload={"name": "after the end", "chosen": 1},
            prev_hash=lines[-1]["hash"],
        )
        out = io.BytesIO()
        write_events([extra], out)
        with open(folder / "run.jsonl", "ab") as f:
            f.write(out.getvalue())
        return
    elif edit == "cut":
        lines = lines[:9]
    (folder / "run.jsonl").write_bytes(rehash(lines))


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        ("insert", "hashes to"),
        ("replace", "hashes to"),
        ("append", "after its end"),
        ("cut", "tail was cut"),
    ],
)
def test_an_edited_and_rehashed_run_fails_at_the_seal(
    bundle: tuple[Path, str, Path], edit: str, words: str
) -> None:
    folder, vkey, _ = bundle
    _tamper_run(folder, edit)
    data = _verify(folder, vkey)
    assert data["ok"] is False
    assert data["failed_check"] == "leaf"
    assert words in str(data["message"])
    checks = {c["check"]: c["ok"] for c in data["checks"]}  # type: ignore[attr-defined]
    assert checks["run"] is True  # the forged chain itself is flawless: only the seal tells


def test_a_seal_moved_to_another_run_fails(bundle: tuple[Path, str, Path], tmp_path: Path) -> None:
    folder, vkey, db = bundle
    other = tmp_path / "evidence-b"
    assert tacho("evidence", "run-b", "-o", str(other), "--key", vkey, store=db).exit_code == 0
    shutil.copy(folder / "run.tlog-proof", other / "run.tlog-proof")
    data = _verify(other, vkey)
    assert data["failed_check"] == "leaf"
    assert "moved to another run" in str(data["message"])


def test_a_proof_with_one_bit_flipped_fails(bundle: tuple[Path, str, Path]) -> None:
    folder, vkey, _ = bundle
    proof = TlogProof.parse((folder / "run.tlog-proof").read_bytes())
    assert proof.path  # a tree of 6 leaves: a path of 2 or 3 hashes
    flipped = bytearray(proof.path[0])
    flipped[7] ^= 0x10
    bad = TlogProof(proof.index, (bytes(flipped), *proof.path[1:]), proof.checkpoint, proof.extra)
    (folder / "run.tlog-proof").write_bytes(bad.to_bytes())
    data = _verify(folder, vkey)
    assert data["failed_check"] == "inclusion"
    assert "does not lead to the root" in str(data["message"])


def test_a_checkpoint_resigned_with_another_key_fails(
    bundle: tuple[Path, str, Path], tmp_path: Path
) -> None:
    folder, vkey, _ = bundle
    forger, _ = make_key(tmp_path / "forger", "log.example/tachograph")
    proof = TlogProof.parse((folder / "run.tlog-proof").read_bytes())
    resigned = Note(proof.checkpoint.text).signed(forger)
    forged = TlogProof(proof.index, proof.path, resigned, proof.extra)
    (folder / "run.tlog-proof").write_bytes(forged.to_bytes())
    data = _verify(folder, vkey)
    assert data["failed_check"] == "signature"
    assert "no key among the trusted ones" in str(data["message"])
    # A valid-looking signature line under the trusted key's name and id that does not verify
    # makes the note invalid outright.
    good_id = proof.checkpoint.signatures[0]
    spliced = Note(
        proof.checkpoint.text,
        (type(good_id)(good_id.name, good_id.key_id, resigned.signatures[0].signature),),
    )
    (folder / "run.tlog-proof").write_bytes(
        TlogProof(proof.index, proof.path, spliced, proof.extra).to_bytes()
    )
    data = _verify(folder, vkey)
    assert data["failed_check"] == "signature"
    assert "does not verify" in str(data["message"])


def test_a_changed_root_fails_the_signature(bundle: tuple[Path, str, Path]) -> None:
    folder, vkey, _ = bundle
    proof = TlogProof.parse((folder / "run.tlog-proof").read_bytes())
    cp = Checkpoint.parse(proof.checkpoint.text)
    moved = Checkpoint(cp.origin, cp.size, bytes(32))
    note = Note(moved.body(), proof.checkpoint.signatures)
    (folder / "run.tlog-proof").write_bytes(
        TlogProof(proof.index, proof.path, note, proof.extra).to_bytes()
    )
    report = verify_evidence(folder, keys=[VerifierKey.parse(vkey)])
    assert report.failure is not None
    assert report.failure[0] == "signature"
    assert base64.b64encode(bytes(32)).decode() in note.text


def test_an_erased_payload_in_the_bundle_is_reported(bundle: tuple[Path, str, Path]) -> None:
    # SPEC section 8, check 5: an erased payload (payload and salt null) verifies, and is
    # reported; the bundle's verdict said nothing of it.
    folder, vkey, _ = bundle
    honest = _verify(folder, vkey)
    assert honest["erased"] == []
    lines = (folder / "run.jsonl").read_bytes().splitlines()
    line = json.loads(lines[5])
    line["payload"] = None
    line["salt"] = None
    lines[5] = json.dumps(line, separators=(",", ":")).encode()
    (folder / "run.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    data = _verify(folder, vkey)
    assert data["ok"] is True
    assert data["erased"] == [5]
    text = tacho("verify", str(folder), "--key", vkey).output
    assert "1 payload(s) not in the bundle (erased, or withheld" in text
    assert "at seq 5" in text


def test_writing_a_bundle_is_a_read_recorded_in_the_store_audit(
    bundle: tuple[Path, str, Path], tmp_path: Path
) -> None:
    # the bundle holds every payload (the run's key secret among them): it is read for a
    # purpose and recorded, as an export is; it was read with no record
    _folder, vkey, db = bundle
    with SQLiteStore(db) as store:
        before = [r for r in store.read_audit() if r.action == "read"]
    again = tmp_path / "evidence-b"
    made = tacho(
        "evidence", "run-a", "-o", str(again), "--key", vkey, "--purpose", "audit", store=db
    )
    assert made.exit_code == 0, made.output
    with SQLiteStore(db) as store:
        reads = [r for r in store.read_audit() if r.action == "read"]
    assert len(reads) == len(before) + 1
    assert reads[-1].detail["purpose"] == "audit"
    assert reads[-1].detail["run_id"] == "run-a"
    verified = _verify(again, vkey)
    assert verified["ok"] is True
    # what the purpose may not read is withheld: the bundle reads it as erased, and the
    # command says which seqs it withheld (the store erased none of them)
    withheld = verified["erased"]
    assert withheld
    assert f"{len(withheld)} payload(s) withheld for purpose audit" in made.stderr
    as_json = tacho(
        "evidence",
        "run-a",
        "-o",
        str(tmp_path / "ev-c"),
        "--purpose",
        "audit",
        "--json",
        store=db,
    )
    assert json.loads(as_json.stdout)["withheld"] == withheld
    plain = tacho("evidence", "run-a", "-o", str(tmp_path / "ev-d"), "--json", store=db)
    assert json.loads(plain.stdout)["withheld"] == []


def test_a_bundle_whose_run_file_is_a_directory_fails_the_run_check(
    bundle: tuple[Path, str, Path],
) -> None:
    folder, vkey, _ = bundle
    (folder / "run.jsonl").unlink()
    (folder / "run.jsonl").mkdir()
    data = _verify(folder, vkey)
    assert data["failed_check"] == "run"
    assert "cannot read run.jsonl" in str(data["message"])


def test_the_events_after_the_last_seal_are_counted_as_unsealed(tmp_path: Path) -> None:
    """SPEC section 9: the events after a run's last seal are reported as unsealed; a
    reader of ``--json`` must see them, since nothing proves them (a forged end among
    them verifies)."""
    key, _ = make_key(tmp_path)
    db = tmp_path / "store" / "t.db"
    with SQLiteStore(db) as store:
        record(store, "run-a", 8, key=key, finish=False)  # sealed at seq 4 only
    out = tmp_path / "ev"
    vkey = str(key.verifier)
    assert tacho("evidence", "run-a", "-o", str(out), "--key", vkey, store=db).exit_code == 0
    data = _verify(out, vkey)
    assert data["ok"] is True
    assert (data["sealed_seq"], data["final"], data["unsealed_events"]) == (4, False, 3)
    text = tacho("verify", str(out), "--key", vkey).output
    assert "3 event(s) after it are not sealed: nothing proves them" in text
    with SQLiteStore(db) as store:
        record(store, "run-b", 7, key=key)
    tacho("evidence", "run-b", "-o", str(tmp_path / "ev-b"), "--key", vkey, store=db)
    data = _verify(tmp_path / "ev-b", vkey)
    assert (data["final"], data["unsealed_events"]) == (True, 0)


def test_a_final_seal_on_an_event_other_than_run_finished_fails(tmp_path: Path) -> None:
    """SPEC section 9: ``final`` is true only when the sealed event is the run's
    ``run.finished``; a signed leaf that says otherwise proves no end of the run."""
    from tachograph.record.merkle import SealLeaf
    from tachograph.sealing import SealLog

    key, _ = make_key(tmp_path)
    db = tmp_path / "store" / "t.db"
    with SQLiteStore(db) as store:
        record(store, "run-a", 6, key=None, finish=False, every=100)
        last = store.events("run-a")[-1]
        assert last.type == "decision"
        SealLog(store, key=key).seal([SealLeaf("default", "run-a", last.seq, last.hash, True)])
    out = tmp_path / "ev"
    vkey = str(key.verifier)
    tacho("evidence", "run-a", "-o", str(out), "--key", vkey, store=db)
    data = _verify(out, vkey)
    assert data["failed_check"] == "leaf"
    assert "not run.finished" in str(data["message"])
    stored = json.loads(tacho("verify", "--json", "--key", vkey, store=db).output)
    assert stored["ok"] is False
    assert "not run.finished" in stored["runs"][0]["seal"]["reason"]
