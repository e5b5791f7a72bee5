"""A dictionary of 10,000 candidate e-mails confirms nothing from a stored record without the
key: not the tokens, not the idempotency keys, not the prompt hash, not the payload digests."""

from __future__ import annotations

import hashlib
import hmac
import random
from pathlib import Path
from typing import Any

import tachograph
from tachograph.capture.runtime import sha256_text
from tachograph.privacy import pii_policy
from tachograph.record.canonical import canonical
from tachograph.record.event import digest_payload
from tachograph.record.seal import default_key, key_secret_of

from .planted import KEY

MODEL = "dict-model-2026-01-01"
SYSTEM = "You write receipts. The customer is {email}."


@tachograph.tool(effect="write")
def send_receipt(email: str) -> dict[str, Any]:
    return {"sent_to": email}


@tachograph.model(MODEL)
def write_receipt(request: dict[str, Any]) -> dict[str, Any]:
    return {"model": MODEL, "text": "Thank you."}


def _candidates() -> tuple[list[str], str]:
    names = [
        f"{first}.{last}{n}@example.com"
        for first in ("ann", "bob", "cyd", "dee", "eve")
        for last in ("lee", "ng", "ortiz", "park")
        for n in range(500)
    ]
    assert len(names) == 10_000
    return names, random.Random(7).choice(names)


def test_ten_thousand_candidates_confirm_nothing_without_the_key(tmp_path: Path) -> None:
    candidates, secret = _candidates()
    store = tachograph.open_store(tmp_path / "runs.db", create=True)
    with tachograph.record(
        store, actor="billing", input={"email": secret}, processors=[pii_policy(KEY)]
    ) as run:
        write_receipt({"system": SYSTEM.format(email=secret), "messages": []})
        send_receipt(secret)
        run.output = "ok"
    events = store.events(run.run_id)
    store.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    lines = b"".join(tachograph.canonical(e.to_line()) for e in events)
    record = stored + lines
    request = next(e for e in events if e.type == "tool.requested")
    model_request = next(e for e in events if e.type == "model.request")
    salt = bytes.fromhex(request.salt or "")
    # The run's key secret sits in the record (SPEC section 5): whoever has the log has it.
    key_secret = key_secret_of(events[0].payload)
    assert key_secret is not None

    confirmed = []
    for email in candidates:
        guesses = [
            email.encode(),
            hashlib.sha256(email.encode()).hexdigest().encode(),
            # the default key of SPEC section 5 over the raw arguments and request, under the
            # run's key secret and in the older unkeyed form
            default_key(run.run_id, "send_receipt", canonical({"email": email}), key_secret)
            .rsplit(":", 1)[1]
            .encode(),
            hashlib.sha256(canonical({"email": email})).hexdigest()[:16].encode(),
            hashlib.sha256(canonical({"system": SYSTEM.format(email=email), "messages": []}))
            .hexdigest()[:16]
            .encode(),
            # the prompt hash of the raw system prompt
            sha256_text(SYSTEM.format(email=email)).encode(),
            # a token under a key someone could guess (none, the key id)
            hmac.new(b"", email.encode(), hashlib.sha256).hexdigest()[:16].encode(),
            hmac.new(b"t1", email.lower().encode(), hashlib.sha256).hexdigest()[:16].encode(),
        ]
        raw_payload = {"tool": "send_receipt", "args": {"email": email}, "effect": "write"}
        digest = digest_payload(salt, canonical(raw_payload))
        if any(g in record for g in guesses) or digest == request.payload_digest:
            confirmed.append(email)
    assert confirmed == []

    # With the key the value is found at once: the test above could have failed.
    token = KEY.token(secret.lower())
    assert token.encode() in record
    assert request.payload == {"tool": "send_receipt", "args": {"email": token}, "effect": "write"}
    hits = [e for e in candidates if KEY.token(e.lower()).encode() in record]
    assert hits == [secret]
    # keys and prompt hash are derived from the redacted data
    assert request.idempotency_key == default_key(
        run.run_id, "send_receipt", canonical({"email": token}), key_secret
    )
    assert model_request.payload is not None
    assert model_request.payload["prompt_hash"] == sha256_text(SYSTEM.format(email=token))
