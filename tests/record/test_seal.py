"""The write pipeline: SPEC section 5 keys (the vectors), processors before keys, old runs."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tachograph as tg
from tachograph.record.canonical import canonical
from tachograph.record.seal import KeyDeriver, Sealer, default_key, key_secret_of


def test_keys_json_is_reproduced_exactly(vectors_dir: Path) -> None:
    cases = json.loads((vectors_dir / "keys.json").read_text(encoding="utf-8"))
    assert len(cases) >= 5
    for case in cases:
        secret = bytes.fromhex(case["key_secret"]) if case["key_secret"] else None
        key = default_key(
            case["run_id"], case["name"], canonical(case["args"]), secret, case["repeat"]
        )
        assert key == case["key"], case["desc"]


def test_the_deriver_counts_repeats_and_ignores_key_order() -> None:
    keys = KeyDeriver("r", bytes(16))
    a = keys.key("t", {"x": 1, "y": 2})
    b = keys.key("t", {"y": 2, "x": 1})
    c = keys.key("t", {"x": 1, "y": 2}, custom=lambda args: f"order-{args['x']}")
    assert b == a + "#1"
    assert c == "r:t:order-1"


@settings(max_examples=200)
@given(st.binary(max_size=200) | st.none(), st.binary(max_size=300))
def test_the_deriver_hashes_as_the_standard_library_does(secret: bytes | None, body: bytes) -> None:
    # the deriver prepares the padded key blocks once per run: any secret length (a key
    # longer than SHA-256's 64-byte block is hashed first) must give RFC 2104's HMAC
    if secret is None:
        h = hashlib.sha256(body).hexdigest()[:16]
    else:
        h = hmac.new(secret, body, hashlib.sha256).hexdigest()[:16]
    keys = KeyDeriver("r", secret)
    assert keys.key("t", None, args_jcs=body) == f"r:t:{h}"
    assert keys.key("t", None, args_jcs=body) == f"r:t:{h}#1"


@pytest.mark.parametrize("length", [0, 1, 63, 64, 65, 128, 1000])
def test_the_deriver_hashes_secrets_at_the_block_boundary(length: int) -> None:
    secret = bytes(range(256)) * 4
    secret = secret[:length]
    body = b'{"i":123}'
    h = hmac.new(secret, body, hashlib.sha256).hexdigest()[:16]
    assert KeyDeriver("r", secret).key("t", None, args_jcs=body) == f"r:t:{h}"


def test_the_deriver_secret_cannot_be_swapped_under_it() -> None:
    keys = KeyDeriver("r", bytes(16))
    with pytest.raises(AttributeError):
        keys.secret = b"x" * 16  # type: ignore[misc]
    assert keys.secret == bytes(16)


EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")


def mask_emails(_type: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A stand-in redaction processor: every e-mail becomes a token under a secret key."""

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return EMAIL.sub(
                lambda m: (
                    "pii1:k1:" + hashlib.sha256(b"processor-key" + m[0].encode()).hexdigest()[:16]
                ),
                value,
            )
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    result = walk(payload)
    assert isinstance(result, dict)
    return result


@tg.tool(effect="read")
def lookup_customer(email: str) -> dict[str, Any]:
    return {"found": True, "contact": email}


@tg.model("keymodel-2026-01-01")
def ask(request: dict[str, Any]) -> dict[str, Any]:
    return {"model": "keymodel-2026-01-01", "text": "ok"}


def test_no_envelope_field_confirms_a_masked_email(tmp_path: Path) -> None:
    secret_email = "jane.roe.4711@example.org"
    store = tg.open_store(tmp_path / "s.db")
    with tg.record(store, actor="support", run_id="pii-1", processors=[mask_emails]):
        lookup_customer(secret_email)
        ask(
            {
                "system": f"Help {secret_email}",
                "messages": [{"role": "user", "content": secret_email}],
            }
        )
    events = store.events("pii-1")
    secret = key_secret_of(events[0].payload)
    assert secret is not None
    # The dictionary: 10,000 candidate addresses, the real one among them.
    candidates = [f"user{i}@example.org" for i in range(9_999)] + [secret_email]
    envelope_text = "\n".join(json.dumps(e.envelope()) for e in events)
    assert secret_email not in envelope_text
    for e in events:
        assert secret_email not in json.dumps(e.payload)
    request = next(e for e in events if e.type == "model.request")
    tool = next(e for e in events if e.type == "tool.requested")
    hits = 0
    for candidate in candidates:
        # the keys as the old rule (plain SHA-256 of raw arguments) would have derived them
        raw_tool = canonical({"email": candidate})
        raw_hash = hashlib.sha256(raw_tool).hexdigest()[:16]
        if tool.idempotency_key and raw_hash in tool.idempotency_key:
            hits += 1
        # the keyed hash under the run's secret, but of the raw (unmasked) value
        if tool.idempotency_key == default_key("pii-1", "lookup_customer", raw_tool, secret):
            hits += 1
        prompt = "sha256:" + hashlib.sha256(f"Help {candidate}".encode()).hexdigest()
        if request.payload.get("prompt_hash") == prompt:
            hits += 1
        for value in events:
            if hashlib.sha256(candidate.encode()).hexdigest() in json.dumps(value.envelope()):
                hits += 1
    assert hits == 0
    # The key is derived from the processed arguments, under the run's secret.
    processed = canonical(tool.payload["args"])
    assert tool.idempotency_key == default_key("pii-1", "lookup_customer", processed, secret)
    store.close()


def test_a_run_recorded_before_key_secrets_still_replays_with_its_old_keys(tmp_path: Path) -> None:
    """Build a run as an older recorder did (no key_secret, SHA-256 keys) and replay it."""
    args = {"email": "a@example.org"}
    sealer = Sealer(run_id="old-1", actor="support")
    old_key = f"old-1:lookup_customer:{hashlib.sha256(canonical(args)).hexdigest()[:16]}"
    events = [
        sealer.seal("run.started", {"input": "x", "env": None}),
        sealer.seal(
            "tool.requested",
            {"tool": "lookup_customer", "args": args, "effect": "read"},
            idempotency_key=old_key,
        ),
        sealer.seal(
            "tool.completed",
            {"tool": "lookup_customer", "result": {"found": True, "contact": args["email"]}},
            idempotency_key=old_key,
        ),
        sealer.seal("run.finished", {"status": "ok", "output": True}),
    ]
    store = tg.open_store(tmp_path / "old.db")
    store.append(events)

    def agent(_input: Any) -> bool:
        return bool(lookup_customer("a@example.org")["found"])

    report = tg.replay(store, "old-1", agent)
    assert report.reproduced, report.render()
    store.close()


def test_fifty_recordings_with_a_path_leave_no_threads_or_files(tmp_path: Path) -> None:
    def agent(_input: Any) -> str:
        lookup_customer("x@example.org")
        return "ok"

    tg.record_run(agent, None, store=tmp_path / "warm.db")  # imports, caches
    threads = threading.active_count()
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    for i in range(50):
        result = tg.record_run(agent, None, store=tmp_path / f"s{i % 5}.db")
        assert result.status == "ok"
    assert threading.active_count() == threads
    if fds is not None:
        assert len(os.listdir("/proc/self/fd")) == fds
    with tg.open_store(tmp_path / "s0.db") as store:
        assert len(store.runs()) == 10
        assert all(store.verify(info.run_id).ok for info in store.runs())


def test_a_bad_match_mode_fails_everywhere_listing_the_valid_ones(tmp_path: Path) -> None:
    store = tg.open_store(tmp_path / "m.db")
    result = tg.record_run(lambda _i: "ok", None, store=store, actor="a")
    for call in (
        lambda: tg.replay(store, result.run_id, lambda _i: "ok", match="kye"),
        lambda: tg.fork(store, result.run_id, 0, lambda _i: "ok", match="kye"),
    ):
        with pytest.raises(tg.ReplayError, match="expected one of 'strict', 'key'"):
            call()
    store.close()


def test_reseal_derives_default_keys_again_and_keeps_a_tools_own_key() -> None:
    """Resealing through a processor re-derives the default keys under the run's secret (the
    completions follow their requests), keeps a tool's own key as given, and counts an erased
    request's key for the repeats after it."""
    secret = bytes(range(16))
    raw = Sealer(run_id="rs-1", actor="a")
    keys = KeyDeriver("rs-1", secret)
    email = {"email": "ann@example.org"}
    k1 = keys.key("look", email)
    k_erased = keys.key("look", {**email, "n": 1})
    k_own = "rs-1:refund:order-7"
    events = [
        raw.seal("run.started", {"input": "x", "env": None, "key_secret": secret.hex()}),
        raw.seal("tool.requested", {"tool": "look", "args": email, "effect": "read"},
                 idempotency_key=k1),
        raw.seal("tool.completed", {"tool": "look", "result": 1}, idempotency_key=k1),
        raw.seal("tool.requested", {"tool": "look", "args": {**email, "n": 1}, "effect": "read"},
                 idempotency_key=k_erased),
        raw.seal("tool.requested", {"tool": "refund", "args": email, "effect": "write"},
                 idempotency_key=k_own),
    ]  # fmt: skip
    events[3] = replace(events[3], payload=None, salt=None, payload_bytes=None)
    sealer = Sealer(run_id="rs-1", actor="a", processors=[mask_emails])
    out = [sealer.reseal(e) for e in events]
    assert out[0] is events[0]  # nothing of it changes
    masked = out[1].payload["args"]
    assert masked != email
    assert out[1].idempotency_key == default_key("rs-1", "look", canonical(masked), secret)
    assert out[2].idempotency_key == out[1].idempotency_key
    assert out[3].idempotency_key == k_erased
    assert out[3].erased
    assert out[4].idempotency_key == k_own
    assert tg.verify_events(out).ok
    # resealing the result again changes nothing: an import twice finds duplicates
    again = Sealer(run_id="rs-1", actor="a", processors=[mask_emails])
    assert [again.reseal(e).hash for e in out] == [e.hash for e in out]
