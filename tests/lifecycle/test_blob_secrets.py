"""Secrets never reach a blob file: the default secrets redaction runs before every processor
of the caller's that is not itself a redactor, whatever the order of the list (a BlobRule
writes its blob when it is called, before any redactor that follows it in the list)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import tachograph
from tachograph.capture.recorder import writer_for
from tachograph.lifecycle.blobs import BlobRule, BlobStore
from tachograph.privacy import KeyRing, Redactor, pii_policy, redact_secrets
from tachograph.privacy.redactor import default_processors
from tachograph.store import SQLiteStore

KEY = "sk-proj-CANARYblobKEY1234567890abc"
RING = KeyRing.of(b"0123456789abcdef0123456789abcdef", key_id="t1")


@tachograph.model("acme-chat-2026-06-01", provider="acme")
def _chat(request: dict[str, Any]) -> dict[str, Any]:
    return {"text": f"answer with {KEY} and password: 'CANARY pass'"}


def _files(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


ORDERS: dict[str, Callable[[BlobRule], list[Any]]] = {
    "blob-only": lambda rule: [rule],
    "policy-first": lambda rule: [pii_policy(RING), rule],
    "blob-first": lambda rule: [rule, pii_policy(RING)],
    "blob-first-secrets-redactor": lambda rule: [rule, Redactor()],
}


@pytest.mark.parametrize("order", list(ORDERS))
def test_no_blob_file_holds_a_secret(order: str, store: SQLiteStore, tmp_path: Path) -> None:
    blobs = BlobStore.beside(store)
    rule = BlobRule(blobs, paths=["$.response"], types=["model.response"], ttl=60)
    with tachograph.record(store, actor="a", input="x", processors=ORDERS[order](rule)) as run:
        _chat({"q": "hi"})
    writer_for(store).drain()
    (response,) = [e for e in store.events(run.run_id) if e.type == "model.response"]
    ref = response.payload["response"]
    assert ref["$blob"].startswith("sha256:")  # the answer went to a blob
    held = _files(Path(store.path + ".blobs"))
    assert held, "no blob was written"
    assert b"CANARYblobKEY" not in held
    assert b"CANARY pass" not in held
    assert b"[redacted:secret:openai]" in held
    for name in os.listdir(tmp_path):  # nor the database and its side files
        if name.startswith("runs.db") and os.path.isfile(tmp_path / name):
            assert b"CANARYblobKEY" not in (tmp_path / name).read_bytes()


def test_a_caller_redactor_stands_in_for_the_default_only_when_it_runs_first(
    tmp_path: Path,
) -> None:
    rule = BlobRule(BlobStore(tmp_path / "blobs"), paths=["$.x"])
    policy = pii_policy(RING)

    def chain(procs: Sequence[Any], **options: Any) -> tuple[Any, ...]:
        return default_processors(procs, environ={}, **options)

    assert chain([policy, rule]) == (policy, rule)
    assert chain([Redactor(kinds=()), policy, rule]) == (Redactor(kinds=()), policy, rule)
    assert chain([rule, policy]) == (redact_secrets, rule, policy)
    assert chain([rule, policy], redact_secrets=False) == (rule, policy)
