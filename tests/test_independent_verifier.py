"""An auditor's verifier, written from SPEC.md alone: json, hashlib and the rfc8785 package.

SPEC says a run must be verifiable "with nothing but this page, SHA-256 and an RFC 8785
canonicalizer, in any language". This file is that verifier, sharing no code with
tachograph, run over runs that tachograph recorded and exported: if tachograph's hashing
drifted from the spec (key order, number formatting, what is in the envelope), these tests
fail even where tachograph's own verifier agrees with itself.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import rfc8785

import tachograph
from tachograph.demo import agent as demo

ENVELOPE = (
    "v",
    "tenant",
    "run_id",
    "seq",
    "event_id",
    "ts",
    "type",
    "actor",
    "trace_id",
    "span_id",
    "idempotency_key",
    "model",
    "seed",
    "payload_digest",
    "prev_hash",
)


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def audit(lines: list[str]) -> list[int]:
    """Verify one run per SPEC section 8; return the seqs whose payloads are erased."""
    erased = []
    prev = None
    first: dict[str, Any] | None = None
    for position, text in enumerate(lines):
        line = json.loads(text)
        assert set(line) == {*ENVELOPE, "hash", "payload", "salt"}, position
        first = first or line
        assert line["seq"] == position
        assert (line["run_id"], line["tenant"]) == (first["run_id"], first["tenant"])
        envelope = {key: line[key] for key in ENVELOPE}
        recomputed = _sha(rfc8785.dumps(envelope))
        assert line["hash"] == recomputed, f"hash at seq {position}"
        assert line["prev_hash"] == prev, f"link at seq {position}"
        if line["payload"] is None and line["salt"] is None:
            erased.append(position)
        else:
            digest = _sha(bytes.fromhex(line["salt"]) + rfc8785.dumps(line["payload"]))
            assert line["payload_digest"] == digest, f"payload at seq {position}"
        prev = recomputed
    return erased


def _export(store: tachograph.Store, run_id: str) -> list[str]:
    out = io.BytesIO()
    tachograph.export_run(store, run_id, out)
    # JSON Lines end at "\n" only: str.splitlines would also split inside a string at U+2028.
    return out.getvalue().decode("utf-8").rstrip("\n").split("\n")


def test_a_recorded_demo_run_verifies_by_the_spec_alone(tmp_path: Path) -> None:
    store = tachograph.open_store(tmp_path / "runs.db")
    result = tachograph.record_run(demo.billing_agent, "Order A-4471 arrived damaged.", store=store)
    lines = _export(store, result.run_id)
    assert len(lines) == 15
    assert audit(lines) == []


def test_awkward_values_hash_the_same_in_both_verifiers(tmp_path: Path) -> None:
    # Integral and tiny floats, astral characters and keys that sort differently by UTF-16
    # code units than by code points: where a fast canonicalizer would go wrong.
    awkward = {
        "weights": [1.0, 2.0**60, 1e-7, 3e-6, -0.0, 0.1, 1e21, 333333333.3333333],
        "\ue000": "private use",
        "\U0001f600": "astral key",
        "z": "caf\u00e9 \u2028 \U0001d11e",
        "nested": {"b": [True, False, None], "a": {"\u00e9": 1}},
    }
    store = tachograph.open_store(tmp_path / "runs.db")
    with tachograph.record(store, actor="auditor-test", input=awkward) as run:
        tachograph.emit("acme.awkward.values", awkward)
        tachograph.decide("route", "b", chosen_from=["a", "b"])
        run.output = awkward
    assert audit(_export(store, run.run_id)) == []


def test_the_spec_vectors_pass_the_auditor(vectors_dir: Path) -> None:
    lines = (
        (vectors_dir / "events" / "refund_run.jsonl").read_text("utf-8").rstrip("\n").split("\n")
    )
    assert audit(lines) == []
    erased = (vectors_dir / "events" / "refund_run_erased.jsonl").read_text("utf-8")
    assert audit(erased.rstrip("\n").split("\n")) == [1, 2]


# -- SPEC section 9: evidence bundles, from the spec and the C2SP formats alone ---------------
# json, hashlib, base64, rfc8785 and cryptography's Ed25519; no tachograph code below this line
# until the tests, which use tachograph only to record a run and write its bundle.

import base64  # noqa: E402

import pytest  # noqa: E402


def _leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def inclusion_root(index: int, size: int, leaf_hash: bytes, path: list[bytes]) -> bytes:
    """RFC 9162 section 2.1.3.2."""
    assert 0 <= index < size, "index outside the tree"
    fn, sn, r = index, size - 1, leaf_hash
    for p in path:
        assert sn != 0, "proof too long"
        if fn & 1 or fn == sn:
            r = _node(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = _node(r, p)
        fn >>= 1
        sn >>= 1
    assert sn == 0, "proof too short"
    return r


def _check_note(note: str, trusted: list[str]) -> tuple[str, str]:
    """The body of a signed note and the name of a trusted key whose signature verifies."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    body, _, signatures = note.rpartition("\n\n")
    body += "\n"
    for vkey in trusted:
        name, key_id, blob = vkey.split("+", 2)
        raw = base64.b64decode(blob)
        assert raw[0] == 1
        assert hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4].hex() == key_id
        for line in signatures.rstrip("\n").split("\n"):
            dash, sig_name, sig = line.split(" ")
            assert dash == "\u2014"
            sig_raw = base64.b64decode(sig)
            if sig_name == name and sig_raw[:4].hex() == key_id:
                Ed25519PublicKey.from_public_bytes(raw[1:]).verify(sig_raw[4:], body.encode())
                return body, name
    raise AssertionError("no signature by a trusted key")


def audit_evidence(folder: Path, trusted: list[str]) -> int:
    """Check an evidence bundle per SPEC section 9; return the sealed seq."""
    lines = (folder / "run.jsonl").read_text("utf-8").rstrip("\n").split("\n")
    audit(lines)
    events = [json.loads(text) for text in lines]
    head, _, checkpoint = (folder / "run.tlog-proof").read_text("utf-8").partition("\n\n")
    proof_lines = head.split("\n")
    assert proof_lines[0] == "c2sp.org/tlog-proof@v1"
    assert proof_lines[1].startswith("extra ")
    assert proof_lines[2].startswith("index ")
    leaf = base64.b64decode(proof_lines[1][6:])
    index = int(proof_lines[2][6:])
    path = [base64.b64decode(p) for p in proof_lines[3:]]
    seal = json.loads(leaf)
    assert rfc8785.dumps(seal) == leaf, "the leaf is not canonical"
    assert set(seal) == {"tenant", "run_id", "seq", "hash", "final"}
    assert (seal["tenant"], seal["run_id"]) == (events[0]["tenant"], events[0]["run_id"])
    assert seal["seq"] < len(events), "the run stops before the sealed seq"
    assert events[seal["seq"]]["hash"] == seal["hash"], "the sealed event differs"
    if seal["final"]:
        assert len(events) == seal["seq"] + 1, "the run goes on past its final seal"
    body, _ = _check_note(checkpoint, trusted)
    origin, size, root = body.rstrip("\n").split("\n")[:3]
    assert origin.endswith("/tachograph/" + seal["tenant"])
    assert inclusion_root(index, int(size), _leaf_hash(leaf), path) == base64.b64decode(root)
    return int(seal["seq"])


def test_the_merkle_vectors_pass_the_auditors_inclusion_check(vectors_dir: Path) -> None:
    for path in sorted((vectors_dir / "merkle" / "inclusion").rglob("*.json")):
        case = json.loads(path.read_text())
        try:
            got = inclusion_root(
                case["leafIdx"],
                case["treeSize"],
                base64.b64decode(case["leafHash"]),
                [base64.b64decode(p) for p in case["proof"] or []],
            )
            ok = got == base64.b64decode(case["root"]) and len(got) == 32
            ok = ok and len(base64.b64decode(case["leafHash"])) == 32
        except AssertionError:
            ok = False
        assert ok is not case["wantErr"], path.name


def _sealed_bundle(tmp_path: Path) -> tuple[Path, str]:
    from tachograph.capture.recorder import Recorder
    from tachograph.record.checkpoint import generate_key
    from tachograph.sealing import SealingObserver, SealPolicy, write_evidence

    key = generate_key("auditor.example/tachograph")
    store = tachograph.open_store(tmp_path / "runs.db")
    for run_id, length in (("audited", 9), ("other", 4)):
        observer = SealingObserver(policy=SealPolicy(every_events=4), key=key)
        recorder = Recorder(store, run_id=run_id, actor="agent", observers=[observer])
        recorder.append("run.started", {"input": run_id, "env": {}})
        for step in range(length - 2):
            recorder.append("decision", {"name": "step", "chosen": step, "x": 1.0})
        recorder.append("run.finished", {"status": "ok"})
        recorder.flush()
        observer.drain()
    folder = write_evidence(store, "audited", tmp_path / "bundle", verifier_keys=[key.verifier])
    return folder, str(key.verifier)


def test_a_sealed_bundle_verifies_by_the_spec_alone(tmp_path: Path) -> None:
    folder, vkey = _sealed_bundle(tmp_path)
    assert (folder / "verifier.keys").read_text().strip() == vkey
    assert audit_evidence(folder, [vkey]) == 8


def test_the_auditor_refuses_what_tachograph_refuses(tmp_path: Path) -> None:
    from tachograph.record.checkpoint import VerifierKey
    from tachograph.sealing import verify_evidence

    folder, vkey = _sealed_bundle(tmp_path)
    text = (folder / "run.tlog-proof").read_text()
    head, _, rest = text.partition("\n\n")
    lines = head.split("\n")
    flipped = bytearray(base64.b64decode(lines[3]))
    flipped[0] ^= 1
    lines[3] = base64.b64encode(bytes(flipped)).decode()
    (folder / "run.tlog-proof").write_text("\n".join(lines) + "\n\n" + rest)
    with pytest.raises(AssertionError):
        audit_evidence(folder, [vkey])
    assert not verify_evidence(folder, keys=[VerifierKey.parse(vkey)]).ok
