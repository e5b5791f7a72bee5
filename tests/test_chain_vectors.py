"""Verification (SPEC section 8) against every golden file in vectors/events."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tachograph.record import verify as chain
from tachograph.record.event import new_event
from tachograph.record.jsonl import read_jsonl, verify_jsonl
from tachograph.record.verify import (
    Check,
    VerifyReport,
    iter_jsonl_runs,
    verify_events,
    verify_lines,
)
from tachograph.testing import build_run

RUN_ID = "run_2026_10_15_0042"


def _events_dir(vectors_dir: Path) -> Path:
    return vectors_dir / "events"


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _only(reports: list[VerifyReport]) -> VerifyReport:
    assert len(reports) == 1, [r.render() for r in reports]
    return reports[0]


def test_refund_run_verifies(vectors_dir: Path) -> None:
    path = _events_dir(vectors_dir) / "refund_run.jsonl"
    report = _only(verify_jsonl(path))
    assert report.ok, report.render()
    assert (report.run_id, report.tenant, report.events) == (RUN_ID, "acme-eu", 11)
    assert report.failures == ()
    assert report.erased == ()
    assert report.head == _lines(path)[-1]["hash"]
    assert report.sealed is False
    assert report.source == str(path)
    assert "verified, 11 events" in report.render()
    assert "unsealed" in report.render()


def test_refund_run_erased_verifies_and_reports_the_erasures(vectors_dir: Path) -> None:
    path = _events_dir(vectors_dir) / "refund_run_erased.jsonl"
    report = _only(verify_jsonl(path))
    assert report.ok, report.render()
    assert report.erased == (1, 2)
    assert report.events == 11
    assert "2 payload(s) erased at seq 1, 2" in report.render()
    # erasing payloads does not touch the chain: same head as the full run
    full = _only(verify_jsonl(_events_dir(vectors_dir) / "refund_run.jsonl"))
    assert report.head == full.head
    lines = _lines(path)
    assert [(line["payload"], line["salt"]) for line in lines[1:3]] == [(None, None)] * 2


def test_every_invalid_file_is_listed_in_expected_json(vectors_dir: Path) -> None:
    invalid = _events_dir(vectors_dir) / "invalid"
    expected = json.loads((invalid / "expected.json").read_text())
    assert {p.stem for p in invalid.glob("*.jsonl")} == set(expected)


def test_invalid_vector_fails_where_expected(vectors_dir: Path, invalid_case: str) -> None:
    invalid = _events_dir(vectors_dir) / "invalid"
    want = json.loads((invalid / "expected.json").read_text())[invalid_case]
    path = invalid / f"{invalid_case}.jsonl"
    report = _only(verify_jsonl(path))
    assert not report.ok
    first = report.first_failure
    assert first is not None
    assert (first.seq, int(first.check)) == (want["first_bad_seq"], want["check"]), report.render()
    assert report.head is None
    rendered = report.render()
    assert f"FAILED at seq {first.seq}" in rendered
    assert f"check {want['check']} ({Check(want['check']).title})" in rendered
    as_dict = report.to_dict()
    assert as_dict["status"] == "failed"
    assert as_dict["first_failure"]["seq"] == want["first_bad_seq"]
    assert as_dict["first_failure"]["check"] == want["check"]
    # the same answer through the lower-level splitter
    runs = list(iter_jsonl_runs(path.read_bytes().splitlines(keepends=True)))
    assert len(runs) == 1
    checker, _parsed = runs[0]
    lower = checker.report().first_failure
    assert lower is not None
    assert (lower.seq, lower.check) == (first.seq, first.check)


def test_verify_lines_and_verify_events_agree_on_the_refund_run(vectors_dir: Path) -> None:
    path = _events_dir(vectors_dir) / "refund_run.jsonl"
    by_lines = verify_lines(_lines(path))
    [events] = read_jsonl(path)
    by_events = verify_events(events)
    assert by_lines.ok
    assert by_events.ok
    assert by_lines.head == by_events.head
    assert by_lines.events == by_events.events == 11


def test_verify_events_finds_an_edited_payload(vectors_dir: Path) -> None:
    [events] = read_jsonl(_events_dir(vectors_dir) / "refund_run.jsonl")
    edited = list(events)
    target = edited[6]
    assert target.payload is not None
    forged_payload = {**target.payload, "forged": True}
    object.__setattr__(target, "payload", forged_payload)
    object.__setattr__(target, "payload_bytes", None)
    report = verify_events(edited)
    assert report.first_failure is not None
    assert (report.first_failure.seq, report.first_failure.check) == (6, Check.PAYLOAD)


def test_several_runs_in_one_stream_are_split_and_checked_each(vectors_dir: Path) -> None:
    refund = (_events_dir(vectors_dir) / "refund_run.jsonl").read_bytes()
    other = b"".join(e.to_json() + b"\n" for e in build_run("other-run", 4, tenant="acme-eu"))
    # the same run id under another tenant is another run
    twin = b"".join(e.to_json() + b"\n" for e in build_run(RUN_ID, 2, tenant="acme-us"))
    tampered = (_events_dir(vectors_dir) / "invalid" / "salt_edited.jsonl").read_bytes()
    stream = refund + b"\n" + twin + other
    reports = verify_jsonl(io.BytesIO(stream))
    assert [(r.run_id, r.tenant, r.events, r.ok) for r in reports] == [
        (RUN_ID, "acme-eu", 11, True),
        (RUN_ID, "acme-us", 2, True),
        ("other-run", "acme-eu", 4, True),
    ]
    reports = verify_jsonl(io.BytesIO(other + tampered))
    assert [(r.run_id, r.ok) for r in reports] == [("other-run", True), (RUN_ID, False)]


def test_progress_counts_every_line(vectors_dir: Path) -> None:
    ticks: list[int] = []
    verify_jsonl(_events_dir(vectors_dir) / "refund_run.jsonl", progress=ticks.append)
    assert sum(ticks) == 11


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"not json at all", "not valid JSON"),
        (b"[1, 2, 3]", "must be a JSON object"),
        (b'{"v": 1}', "missing key"),
    ],
)
def test_a_malformed_first_line_is_check_1_at_seq_0(line: bytes, why: str) -> None:
    report = _only(verify_jsonl(io.BytesIO(line + b"\n")))
    first = report.first_failure
    assert first is not None
    assert (first.seq, first.check, first.line) == (0, Check.FORMAT, 1)
    assert why in first.message


def test_lone_surrogates_in_envelope_strings_are_reported_not_raised() -> None:
    [event] = build_run("run-x", 1)
    for key in ("actor", "model", "idempotency_key"):
        line = event.to_line()
        line[key] = "bad \ud800"
        raw = json.dumps(line).encode()  # \ud800 escape: valid JSON, invalid Unicode
        report = _only(verify_jsonl(io.BytesIO(raw)))
        assert report.first_failure is not None
        assert report.first_failure.check is Check.FORMAT
        assert "surrogate" in report.first_failure.message


def test_a_rewritten_tail_is_not_detected_and_the_report_says_unsealed() -> None:
    # SPEC section 8: a hash chain alone cannot reveal a truncated tail or an appended forgery.
    events = build_run("run-x", 3)
    forged = new_event(
        run_id="run-x",
        seq=3,
        type="run.finished",
        actor="mallory",
        payload={"status": "ok"},
        prev_hash=events[-1].hash,
    )
    report = verify_events([*events, forged])
    assert report.ok
    assert report.sealed is False
    assert "unsealed" in report.render()
    assert verify_events(events[:2]).ok  # truncated


# -- check 1 on stored events: the fast path never admits what the full check refuses ------------

_DIGEST = "sha256:" + "0123456789abcdef" * 4
_ODD_STRINGS = [
    "",
    " ",
    "\n",
    "x\ny",
    "é",
    "bad \ud800",
    "\udcff",
    "0" * 32,
    "0" * 16,
    "A" * 32,
    "a" * 32,
    "f" * 16,
    _DIGEST,
    _DIGEST.upper(),
    _DIGEST + "\n",
    "sha256:" + "0" * 63,
    "2026-10-15T03:12:09.412000Z",
    "２０２６-10-15T03:12:09.412000Z",  # noqa: RUF001 - fullwidth digits, on purpose
    "01J9Z8Q2M4AAAAAAAAAAAAAAAA",
    "handoff",
    "decision",
    "run.started",
    "Run.started",
    "x" * 129,
    "0123456789abcdef0123456789abcdef",
]
_ODD_VALUES = [None, 0, 1, -1, True, 1.0, 2**53, -(2**53 - 1), 2**62, b"bytes", [], {}]
_odd = st.sampled_from(_ODD_STRINGS + _ODD_VALUES) | st.text(max_size=8)
_FIELDS = [
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
    "hash",
    "salt",
    "payload",
    "payload_bytes",
]
_BASE = build_run("run-x", 2)[1]


def test_the_fast_format_check_agrees_on_every_single_change() -> None:
    for name in _FIELDS:
        for value in _ODD_STRINGS + _ODD_VALUES:
            event = dataclasses.replace(_BASE, **{name: value})
            fast, full = chain._check_event_format(event), chain._check_event_format_fully(event)
            assert fast == full, (name, value)


@settings(max_examples=500)
@given(st.dictionaries(st.sampled_from(_FIELDS), _odd, min_size=2, max_size=4))
def test_the_fast_format_check_agrees_with_the_full_one(changes: dict[str, Any]) -> None:
    event = dataclasses.replace(_BASE, **changes)
    assert chain._check_event_format(event) == chain._check_event_format_fully(event)


def test_the_fast_format_check_is_taken_for_ordinary_events() -> None:
    for event in build_run("run-x", 5, tenant="acme", status="ok"):
        assert chain._plainly_well_formed(event)
    assert not chain._plainly_well_formed(dataclasses.replace(_BASE, actor="agent \u2603"))
    assert chain._check_event_format(dataclasses.replace(_BASE, actor="agent \u2603")) is None
