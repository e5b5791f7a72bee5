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
