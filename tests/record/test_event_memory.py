"""What an event keeps in memory: its payload bytes in an object of their own size.

orjson hands back its bytes in the buffer it wrote them into, at least 4 KiB; an event that
kept that object would carry about 4 KiB of slack for a small payload, while it waits for the
writer thread (thousands may) or sits in a run loaded for replay.
"""

from __future__ import annotations

import gc
import io
import tracemalloc
from collections.abc import Callable
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from tachograph.record.event import new_event, stored_json
from tachograph.record.jsonl import read_jsonl

N = 400


def _traced_bytes_each(make: Callable[[int], Any]) -> float:
    """Bytes still allocated per object after making ``N`` of them and keeping them."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [make(i) for i in range(N)]
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(kept) == N
    return (after - before) / N


def _small(i: int) -> dict[str, Any]:
    return {"tool": "lookup", "result": {"item": i, "stock": i % 97}}


def test_stored_json_holds_no_more_than_its_bytes() -> None:
    each = _traced_bytes_each(lambda i: stored_json(_small(i)))
    # about 90 bytes (the object's header and 55 bytes of JSON); orjson's own: over 4,096
    assert each < 512, each


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=20,
)


@given(_JSON)
def test_stored_json_is_orjson_bytes(value: Any) -> None:
    assert stored_json(value) == orjson.dumps(value)


def test_a_built_event_holds_no_buffer_slack() -> None:
    def build(i: int) -> Any:
        return new_event(
            run_id="memory-run",
            seq=0,
            type="tool.completed",
            actor="tester",
            payload=_small(i),
            prev_hash=None,
        )

    each = _traced_bytes_each(build)
    # about 1,200 bytes (envelope strings, payload dict and bytes); with orjson's buffer kept
    # in payload_bytes, 4 KiB more
    assert each < 2_048, each


def test_a_loaded_event_holds_no_buffer_slack() -> None:
    events = []
    prev = None
    for seq in range(N):
        event = new_event(
            run_id="memory-run",
            seq=seq,
            type="tool.completed",
            actor="tester",
            payload=_small(seq),
            prev_hash=prev,
        )
        prev = event.hash
        events.append(event)
    text = b"".join(e.to_json() + b"\n" for e in events)
    del events
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        runs = read_jsonl(io.BytesIO(text))
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert [len(r) for r in runs] == [N]
    assert all(e.payload_bytes == orjson.dumps(e.payload) for e in runs[0])
    # about 2,050 bytes (the event and its share of the run's list and report); with
    # orjson's buffer kept in payload_bytes, 4 KiB more
    assert (after - before) / N < 3_072
