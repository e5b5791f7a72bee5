"""An import that re-runs processors re-derives the idempotency keys and the prompt hash from
the processed data, through the Sealer, exactly as a recording would have: no envelope field
of the imported run lets a dictionary confirm a masked value. The Python ``import_jsonl``
redacts secrets by default, as ``tacho import`` does."""

from __future__ import annotations

import hashlib
import io
import itertools
import os
from pathlib import Path
from typing import Any

import tachograph
from tachograph.capture.runtime import sha256_text
from tachograph.privacy import pii_policy
from tachograph.record.canonical import canonical
from tachograph.record.event import Event
from tachograph.record.jsonl import export_run
from tachograph.record.seal import default_key, key_secret_of
from tachograph.regression.corpus import save_run

from .planted import KEY, STRIPE, hits

MODEL = "import-keys-model-2026-01-01"
SYSTEM = "You write receipts. The customer is {email}."
REAL = "cyd.ortiz0417@example.com"


@tachograph.tool(effect="write")
def send_receipt(email: str) -> dict[str, Any]:
    return {"sent_to": email}


@tachograph.model(MODEL)
def write_receipt(request: dict[str, Any]) -> dict[str, Any]:
    return {"model": MODEL, "text": "Thank you."}


def agent(email: str) -> str:
    write_receipt({"system": SYSTEM.format(email=email), "messages": []})
    send_receipt(email)
    send_receipt(email)  # a repeat: "#1"
    # another address that the processor tokenizes differently: no repeat of the first
    send_receipt("someone.else@example.com")
    return "ok"


def _record(store: tachograph.Store, secret: str, **kw: Any) -> list[Event]:
    with tachograph.record(
        store, actor="billing", input={"email": REAL}, key_secret=secret, **kw
    ) as run:
        run.output = agent(REAL)
    return store.events(run.run_id)


def _tail(key: str | None, run_id: str) -> str | None:
    return None if key is None else key.removeprefix(run_id + ":")


def _confirmed(events: list[Event], candidates: list[str]) -> list[str]:
    secret = key_secret_of(events[0].payload)
    envelopes = b"".join(canonical(e.envelope()) for e in events)
    prompt_hashes = {
        str(e.payload.get("prompt_hash")) for e in events if e.payload and e.type == "model.request"
    }
    run_id = events[0].run_id
    out = []
    for email in candidates:
        raw_args = canonical({"email": email})
        raw_request = canonical({"system": SYSTEM.format(email=email), "messages": []})
        guesses = [
            default_key(run_id, "send_receipt", raw_args, secret).rsplit(":", 1)[1],
            default_key(run_id, MODEL, raw_request, secret).rsplit(":", 1)[1],
            hashlib.sha256(raw_args).hexdigest()[:16],
            hashlib.sha256(raw_request).hexdigest()[:16],
        ]
        if (
            any(g.encode() in envelopes for g in guesses)
            or email.encode() in envelopes
            or sha256_text(SYSTEM.format(email=email)) in prompt_hashes
        ):
            out.append(email)
    return out


def test_an_import_through_a_pii_policy_re_derives_keys_and_prompt_hash(tmp_path: Path) -> None:
    secret = os.urandom(16).hex()
    raw = tachograph.open_store(tmp_path / "raw.db", create=True)
    events = _record(raw, secret, redact_secrets=False)
    run_id = events[0].run_id
    candidates = [f"user{i}@example.com" for i in range(9_999)] + [REAL]
    # the raw recording does confirm the address: the check below could fail
    assert REAL in _confirmed(events, candidates)
    out = io.BytesIO()
    export_run(raw, run_id, out)

    other = tachograph.open_store(tmp_path / "other.db", create=True)
    report = tachograph.import_jsonl(
        other, io.BytesIO(out.getvalue()), processors=[pii_policy(KEY)]
    )
    assert report.stored
    assert report.redacted > 0
    imported = other.events(run_id)
    assert other.verify(run_id).ok
    assert _confirmed(imported, candidates) == []

    # exactly the keys and prompt hash a recording through the same policy derives
    recorded = _record(
        tachograph.open_store(tmp_path / "direct.db", create=True),
        secret,
        processors=[pii_policy(KEY)],
    )
    assert [e.type for e in imported] == [e.type for e in recorded]
    assert [_tail(e.idempotency_key, run_id) for e in imported] == [
        _tail(e.idempotency_key, recorded[0].run_id) for e in recorded
    ]
    for mine, theirs in zip(imported, recorded, strict=True):
        if mine.type != "run.started":
            assert mine.payload == theirs.payload
    keys = [e.idempotency_key for e in imported if e.type == "tool.requested"]
    assert keys[1] == f"{keys[0]}#1"
    assert "#" not in str(keys[2])
    # every completion carries its request's new key
    for request, done in itertools.pairwise(imported):
        if request.type in ("tool.requested", "model.request"):
            assert done.idempotency_key == request.idempotency_key

    # importing the same file again finds every event already there
    again = tachograph.import_jsonl(other, io.BytesIO(out.getvalue()), processors=[pii_policy(KEY)])
    assert (again.written, again.duplicates) == (0, len(imported))

    # the imported run replays as reproduced through the same policy: its keys agree
    replayed = tachograph.replay(
        other, run_id, lambda given: agent(given["email"]), processors=[pii_policy(KEY)]
    )
    assert replayed.reproduced, replayed.render()
    for store in (raw, other):
        store.close()


def test_a_corpus_fixture_saved_through_a_processor_re_derives_its_keys(tmp_path: Path) -> None:
    secret = os.urandom(16).hex()
    raw = tachograph.open_store(tmp_path / "raw.db", create=True)
    events = _record(raw, secret, redact_secrets=False)
    candidates = [f"user{i}@example.com" for i in range(999)] + [REAL]
    saved = save_run(
        raw, events[0].run_id, to=tmp_path / "corpus" / "receipt", verdict="good",
        processors=[pii_policy(KEY)],
    )  # fmt: skip
    fixture = tachograph.read_jsonl(saved)[0]
    assert _confirmed(fixture, candidates) == []
    raw.close()


def test_the_python_import_redacts_secrets_by_default(tmp_path: Path) -> None:
    raw = tachograph.open_store(tmp_path / "raw.db", create=True)

    @tachograph.tool(effect="read")
    def call_api(token: str) -> dict[str, Any]:
        return {"ok": True}

    with tachograph.record(raw, actor="ops", redact_secrets=False) as run:
        call_api(STRIPE)
    path = tmp_path / "run.jsonl"
    with path.open("wb") as f:
        export_run(raw, run.run_id, f)
    assert hits(path.read_bytes())

    kept = tachograph.open_store(tmp_path / "kept.db", create=True)
    plain = tachograph.import_jsonl(kept, path, redact_secrets=False)
    assert plain.redacted == 0
    assert hits(b"".join(canonical(e.to_line()) for e in kept.events(run.run_id)))

    redacted = tachograph.open_store(tmp_path / "redacted.db", create=True)
    report = tachograph.import_jsonl(redacted, path)
    assert report.redacted > 0
    stored = redacted.events(run.run_id)
    assert hits(b"".join(canonical(e.to_line()) for e in stored)) == []
    requested = next(e for e in stored if e.type == "tool.requested")
    assert requested.payload is not None
    assert requested.payload["args"] == {"token": "[redacted:secret:stripe]"}
    for store in (raw, kept, redacted):
        store.close()
