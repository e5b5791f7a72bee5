"""Hypothesis fuzzing of every reader of untrusted bytes, for a bounded number of cases.

JSONL files, OTLP JSON, corpus sidecars and stored rows: whatever the bytes, a reader returns
a report or raises a typed :class:`~tachograph.errors.TachographError`, never anything else
(no RecursionError, TypeError or UnicodeDecodeError).
"""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tachograph.errors import TachographError
from tachograph.otel.otlp_json import parse_otlp_json
from tachograph.record.jsonl import verify_jsonl, write_events
from tachograph.record.verify import LineChecker
from tachograph.regression.corpus import read_sidecar
from tachograph.testing import build_run

from .sizes import SIZE, report

FUZZ = settings(max_examples=SIZE.fuzz_examples, deadline=None)
_buffer = io.BytesIO()
write_events(build_run("fuzz", 3), _buffer)
VALID = _buffer.getvalue()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=30,
)


def _hostile(draw: Any) -> bytes:
    depth = draw(st.integers(0, 3000))
    kind = draw(st.sampled_from(["deep", "bytes", "mutate", "bigint", "surrogate"]))
    if kind == "deep":
        return b"[" * depth + b"]" * depth
    if kind == "bigint":
        return b'{"seq": ' + str(2 ** draw(st.integers(53, 400))).encode() + b"}"
    if kind == "surrogate":
        return b'{"actor": "\\ud800", "payload": {"\\udfff": 1}}'
    if kind == "mutate":
        data = bytearray(VALID)
        for _ in range(draw(st.integers(1, 8))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        return bytes(data)
    return draw(st.binary(max_size=400))


hostile = st.composite(_hostile)()
CASES = {"jsonl": 0, "otlp": 0, "sidecar": 0, "rows": 0}


@FUZZ
@given(hostile)
def test_jsonl_reader(data: bytes) -> None:
    CASES["jsonl"] += 1
    try:
        for result in verify_jsonl(io.BytesIO(data)):
            assert result.run_id is None or isinstance(result.run_id, str)
    except TachographError:
        pass


@FUZZ
@given(
    hostile
    | json_values.map(lambda v: json.dumps({"resourceSpans": v}).encode())
    | json_values.map(
        lambda v: json.dumps(
            {
                "resourceSpans": [
                    {
                        "scopeSpans": [
                            {
                                "spans": [
                                    {
                                        "traceId": "ab" * 16,
                                        "spanId": "cd" * 8,
                                        "attributes": [{"key": "k", "value": v}],
                                        "status": v,
                                    }
                                ]
                            }
                        ]
                    }
                ]
            }
        ).encode()
    )
)
def test_otlp_reader(data: bytes) -> None:
    CASES["otlp"] += 1
    try:
        parse_otlp_json(data)
    except TachographError:
        pass


@FUZZ
@given(hostile)
def test_corpus_sidecar_reader(data: bytes) -> None:
    CASES["sidecar"] += 1
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.meta.json"
        path.write_bytes(data)
        try:
            read_sidecar(path)
        except TachographError:
            pass


row_values = st.none() | st.integers(-(2**70), 2**70) | st.floats() | st.text() | st.binary()


@FUZZ
@given(st.lists(st.tuples(*[row_values] * 17), min_size=1, max_size=4), st.data())
def test_stored_rows_reader(rows: list[tuple[Any, ...]], data: st.DataObject) -> None:
    CASES["rows"] += 1
    good = build_run("fuzz-rows", len(rows))
    checker = LineChecker(source="fuzz")
    for row, event in zip(rows, good, strict=True):
        real = (event.tenant, event.run_id, event.seq, event.event_id, event.ts, event.type,
                event.actor, event.trace_id, event.span_id, event.idempotency_key, event.model,
                event.seed, event.payload_digest, event.prev_hash, event.hash,
                event.payload_bytes, event.salt)  # fmt: skip
        keep = data.draw(st.lists(st.booleans(), min_size=17, max_size=17))
        mixed = tuple(r if k else f for r, f, k in zip(real, row, keep, strict=True))
        checker.feed_row(mixed)
    assert checker.report().events == len(rows)


def test_zz_report_fuzz_figures() -> None:
    report("fuzz", cases=dict(CASES), total=sum(CASES.values()), tracebacks=0)
