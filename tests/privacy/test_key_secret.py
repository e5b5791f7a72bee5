"""The run's key secret (SPEC section 5, ``run.started.key_secret``, 32 hex) is kept as it is:
the default secrets detector and the PII policy never take it, or any 32-hex value, for a
secret, and a recording, an import and a fork all store it unredacted."""

from __future__ import annotations

import io
import os
import random
from pathlib import Path
from typing import Any

import tachograph
from tachograph.privacy import pii_policy, redact_secrets
from tachograph.privacy.redactor import default_processors
from tachograph.record.jsonl import export_run, import_jsonl
from tachograph.record.seal import KEY_SECRET_FIELD, key_secret_of

from .planted import KEY


@tachograph.tool(effect="read")
def look_up(ref: str) -> dict[str, Any]:
    return {"ref": ref, "found": True}


def test_no_detector_takes_a_key_secret_for_a_secret() -> None:
    policy = pii_policy(KEY)
    rng = random.Random(11)
    for _ in range(2000):
        h = rng.randbytes(16).hex()
        payload = {
            KEY_SECRET_FIELD: h,
            "input": {KEY_SECRET_FIELD: h, "value": h, "text": f"secret {h} here"},
        }
        for processor in (redact_secrets, policy):
            assert processor("run.started", payload) is payload
            assert processor("tool.requested", {"args": payload}) == {"args": payload}


def test_recorded_imported_and_forked_runs_keep_the_key_secret(tmp_path: Path) -> None:
    store = tachograph.open_store(tmp_path / "runs.db", create=True)
    secret = os.urandom(16).hex()
    with tachograph.record(
        store, actor="desk", input="ref 7", processors=[pii_policy(KEY)], key_secret=secret
    ) as run:
        look_up("ref-7")
        run.output = "ok"
    started = store.events(run.run_id)[0]
    assert started.payload is not None
    assert started.payload[KEY_SECRET_FIELD] == secret
    assert key_secret_of(started.payload) == bytes.fromhex(secret)

    # An import through the default redaction stores it as it is, and finds the duplicates.
    out = io.BytesIO()
    export_run(store, run.run_id, out)
    other = tachograph.open_store(tmp_path / "other.db", create=True)
    report = import_jsonl(other, io.BytesIO(out.getvalue()), processors=default_processors())
    assert report.redacted == 0
    assert report.written == len(store.events(run.run_id))
    assert other.events(run.run_id)[0].payload == started.payload

    # A fork reuses the parent's secret, through the recording's processors.
    forked = tachograph.fork(
        store, run.run_id, 1, lambda _input: look_up("ref-7"), processors=[pii_policy(KEY)]
    )
    assert forked.new_run_id is not None
    fork_started = store.events(forked.new_run_id)[0]
    assert fork_started.payload is not None
    assert fork_started.payload[KEY_SECRET_FIELD] == secret
    other.close()
    store.close()
