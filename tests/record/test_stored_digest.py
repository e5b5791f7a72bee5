"""Check 5 on stored payloads: the digest must be over the JCS form of the payload (SPEC
sections 2 and 8), not over another serialization of it that some writer might hash.

orjson's sorted output is the JCS form for most payloads, and the verifier takes that short
cut; where the two differ (integral floats, exponents, negative zero), a digest over orjson's
form must fail, in a stored run and in events held in memory alike."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import orjson
import pytest

from tachograph.record.canonical import canonical
from tachograph.record.event import Event, digest_payload, hash_envelope, new_event
from tachograph.record.verify import Check, verify_events
from tachograph.store import SQLiteStore


def _with_digest_over(event: Event, data: bytes) -> Event:
    """``event`` with its payload digest over ``data``, and its hash made to match."""
    digest = digest_payload(bytes.fromhex(event.salt or ""), data)
    redigested = dataclasses.replace(event, payload_digest=digest)
    return dataclasses.replace(redigested, hash=hash_envelope(redigested.envelope_jcs()))


def _run(payload: dict[str, Any], hashed: bytes) -> list[Event]:
    first = new_event(run_id="jcs", seq=0, type="run.started", actor="a", payload={},
                      prev_hash=None)  # fmt: skip
    second = new_event(run_id="jcs", seq=1, type="tool.completed", actor="a",
                       payload=payload, prev_hash=first.hash)  # fmt: skip
    return [first, _with_digest_over(second, hashed)]


NOT_JCS = [
    {"price": 25.0},
    {"x": {"deep": [1.0, 2.5]}},
    {"tiny": 5e-6},
    {"big": 1e16},
    {"neg": -0.0},
    {"t": "a string with 25.0, in it", "n": 3.0},
]


@pytest.mark.parametrize("payload", NOT_JCS)
def test_a_digest_over_orjsons_form_fails_check_5(tmp_path: Path, payload: dict[str, Any]) -> None:
    sorted_form = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
    assert sorted_form != canonical(payload)  # the case under test: the two forms differ
    events = _run(payload, sorted_form)
    store = SQLiteStore(tmp_path / "jcs.db")
    store.append(events)
    for report in (store.verify("jcs"), verify_events(events)):
        assert not report.ok
        failure = report.first_failure
        assert failure is not None
        assert (failure.check, failure.seq) == (Check.PAYLOAD, 1)
    store.close()


@pytest.mark.parametrize("payload", [*NOT_JCS, {"plain": "text", "n": 1, "f": 0.5}])
def test_a_digest_over_the_jcs_form_passes(tmp_path: Path, payload: dict[str, Any]) -> None:
    events = _run(payload, canonical(payload))
    store = SQLiteStore(tmp_path / "ok.db")
    store.append(events)
    assert store.verify("jcs").ok
    assert verify_events(events).ok
    store.close()
