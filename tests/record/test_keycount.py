"""Repeated idempotency keys are numbered exactly as a dict of full key strings numbers them,
in a few bytes per call."""

from __future__ import annotations

import random
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tachograph.capture.recorder import close_all_writers
from tachograph.record.canonical import canonical
from tachograph.record.compiled import NATIVE
from tachograph.record.keycount import U64Set
from tachograph.record.seal import KeyDeriver, default_key

_u64 = st.integers(0, 2**64 - 1)


# The Python table and, where it is built, its compiled twin (which the recorder uses).
_TABLES = [U64Set] + ([NATIVE.U64Set] if NATIVE is not None else [])


@pytest.mark.parametrize("make", _TABLES, ids=lambda t: t.__module__.rsplit(".", 1)[-1])
@settings(max_examples=200)
@given(values=st.lists(_u64 | st.sampled_from([0, 1, 2**64 - 1, 64, 128]), max_size=400))
def test_the_u64_set_agrees_with_a_python_set(make: Any, values: list[int]) -> None:
    table = make()
    reference: set[int] = set()
    for x in values:
        assert table.add(x) == (x not in reference)
        reference.add(x)
    assert len(table) == len(reference)


@settings(max_examples=100)
@given(st.lists(_u64, max_size=300))
def test_the_compiled_table_grows_as_the_python_one(values: list[int]) -> None:
    if NATIVE is None:
        pytest.skip("the compiled helpers are not built or not wanted")
    ours, theirs = NATIVE.U64Set(), U64Set()
    for x in values:
        assert ours.add(x) == theirs.add(x)
        assert ours.nbytes() == theirs.nbytes()
    assert len(ours) == len(theirs)


def _values(pattern: str, count: int) -> list[int]:
    rng = random.Random(pattern)
    if pattern == "hashes":  # what the recorder adds
        return [rng.getrandbits(64) for _ in range(count)]
    if pattern == "ascending":
        return [i * 7 for i in range(count)]
    if pattern == "descending":
        return [2**64 - 1 - i * 3 for i in range(count)]
    if pattern == "repeating":  # many repeats: few values, each added again and again
        return [rng.randrange(3_000) for _ in range(count)]
    return [rng.choice([0, 1, 2**64 - 1, i, rng.getrandbits(64)]) for i in range(count)]


@pytest.mark.parametrize("pattern", ["hashes", "ascending", "descending", "repeating", "edges"])
def test_the_two_tables_agree_past_many_blocks(pattern: str) -> None:
    # thousands of values: blocks fill, hand values to their neighbours both ways and split
    tables = [make() for make in _TABLES]
    reference: set[int] = set()
    for i, x in enumerate(_values(pattern, 40_000)):
        new = x not in reference
        reference.add(x)
        assert [t.add(x) for t in tables] == [new] * len(tables)
        if i % 97 == 0:
            assert len({t.nbytes() for t in tables}) == 1
    assert [len(t) for t in tables] == [len(reference)] * len(tables)
    # a value per 8 bytes at best; random hashes fill the blocks to about seven eighths
    assert 8 * len(reference) <= tables[0].nbytes() <= 10 * len(reference) + 8 * 512 * 2


@pytest.mark.parametrize("make", _TABLES, ids=lambda t: t.__module__.rsplit(".", 1)[-1])
def test_the_table_never_holds_two_copies_of_itself(make: Any) -> None:
    # a hash table doubling into a new one held both at once: half as much again at the peak
    values = _values("hashes", 200_000)
    close_all_writers()  # tracemalloc counts every thread: no other store's writer may run
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        table = make()
        for x in values:
            table.add(x)
        now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    held = now - before
    assert held <= 11 * len(values)
    assert peak - now <= 64 * 1024  # a block and the index's growth, never the whole set


@pytest.mark.parametrize("make", _TABLES, ids=lambda t: t.__module__.rsplit(".", 1)[-1])
@pytest.mark.parametrize("bad", [-1, 2**64, -(2**70)])
def test_integers_outside_64_bits_are_refused(make: Any, bad: int) -> None:
    table = make()
    with pytest.raises(OverflowError):
        table.add(bad)
    assert len(table) == 0


def test_the_recorder_numbers_keys_with_the_compiled_table_where_it_is_built() -> None:
    deriver = KeyDeriver("run-1", None)
    deriver.key("search", {"q": 1})
    tables = list(deriver._counts._seen.values())
    assert [type(t) for t in tables] == [NATIVE.U64Set if NATIVE is not None else U64Set]


def _reference_keys(run_id: str, secret: bytes | None, calls: list[tuple[str, Any]]) -> list[str]:
    counts: dict[str, int] = {}
    out = []
    for name, args in calls:
        base = default_key(run_id, name, canonical(args), secret)
        n = counts.get(base, 0)
        counts[base] = n + 1
        out.append(base if n == 0 else f"{base}#{n}")
    return out


_calls = st.lists(
    st.tuples(st.sampled_from(["search", "fetch", "write"]), st.integers(0, 6)), max_size=80
)


@settings(max_examples=150)
@given(_calls, st.sampled_from([None, b"k" * 16]))
def test_keys_match_the_full_string_numbering(
    calls: list[tuple[str, int]], secret: bytes | None
) -> None:
    deriver = KeyDeriver("run-1", secret)
    calls_args = [(name, {"q": n}) for name, n in calls]
    got = [deriver.key(name, args) for name, args in calls_args]
    assert got == _reference_keys("run-1", secret, calls_args)


@given(st.lists(st.sampled_from(["a", "b", "c", "ü", "\U0001f600"]), max_size=40))
def test_custom_key_parts_are_numbered_too(parts: list[str]) -> None:
    deriver = KeyDeriver("run-1", None)
    got = [deriver.key("pay", p, custom=lambda a: a) for p in parts]
    seen: dict[str, int] = {}
    expected = []
    for p in parts:
        n = seen.get(p, 0)
        seen[p] = n + 1
        expected.append(f"run-1:pay:{p}" + (f"#{n}" if n else ""))
    assert got == expected


def test_memory_per_distinct_call_is_a_few_bytes() -> None:
    deriver = KeyDeriver("run-1", b"s" * 16)
    bodies = [canonical({"q": i}) for i in range(100_000)]
    close_all_writers()  # tracemalloc counts every thread: no other store's writer may run
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for body in bodies:
            deriver.key("search", None, args_jcs=body)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # a dict of key strings held about 134 bytes per call, a hash table of 8-byte slots up to
    # 24; the sorted blocks about 9
    assert grown / len(bodies) <= 12


_needs_compiled_hmac = pytest.mark.skipif(
    NATIVE is None or KeyDeriver("run-1", b"k" * 16).fresh_key("t", b"{}") is None,
    reason="the compiled helpers, or OpenSSL's SHA-256 under them, are not here",
)


@_needs_compiled_hmac
@settings(max_examples=150)
@given(
    st.lists(
        st.tuples(st.sampled_from(["search", "fetch", "wrïte", "\U0001f600"]), st.integers(0, 6)),
        max_size=80,
    ),
    st.sampled_from([b"k" * 16, b"s" * 100]),
)
def test_fresh_keys_then_numbered_repeats_match_the_full_string_numbering(
    calls: list[tuple[str, int]], secret: bytes
) -> None:
    # the session's order: the compiled first-call step, and key() (under its lock) for what
    # it leaves, a repeat
    deriver = KeyDeriver("run-1", secret)
    calls_args = [(name, {"q": n}) for name, n in calls]
    got = []
    for name, args in calls_args:
        body = canonical(args)
        first = deriver.fresh_key(name, body)
        got.append(first if first is not None else deriver.key(name, args, args_jcs=body))
    assert got == _reference_keys("run-1", secret, calls_args)


@_needs_compiled_hmac
def test_fresh_key_adds_to_the_table_key_reads_and_refuses_bad_arguments() -> None:
    deriver = KeyDeriver("run-1", b"k" * 16)
    body = canonical({"q": 1})
    first = deriver.fresh_key("search", body)
    assert first == default_key("run-1", "search", body, b"k" * 16)
    assert deriver.fresh_key("search", body) is None  # a repeat: left to key()
    assert deriver.key("search", {"q": 1}) == f"{first}#1"
    assert deriver.key("search", {"q": 1}) == f"{first}#2"
    table = deriver._counts.table("search")
    assert len(table) == 1
    with pytest.raises(TypeError):
        table.hmac_key(b"short", b"short", body, "p:")  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        table.hmac_key(*deriver._compiled, "not bytes", "p:")  # type: ignore[attr-defined,misc]
    assert len(table) == 1


def test_no_compiled_path_without_a_secret() -> None:
    # a run recorded before key secrets hashes with plain SHA-256: key() does it all
    deriver = KeyDeriver("run-1", None)
    assert deriver.fresh_key("search", canonical({"q": 1})) is None
    assert deriver.key("search", {"q": 1}) == default_key(
        "run-1", "search", canonical({"q": 1}), None
    )


@_needs_compiled_hmac
def test_threads_deriving_at_once_number_every_repeat_once() -> None:
    # eight threads call the same few tools with the same arguments through a session's
    # order (fresh_key without the lock, key() under it): every key is issued exactly once
    import threading

    deriver = KeyDeriver("run-1", b"k" * 16)
    lock = threading.Lock()
    issued: list[str] = []
    start = threading.Barrier(8)

    def work() -> None:
        start.wait()
        mine = []
        for i in range(400):
            name, body = f"tool{i % 3}", canonical({"q": i % 5})
            key = deriver.fresh_key(name, body)
            if key is None:
                with lock:
                    key = deriver.key(name, None, args_jcs=body)
            mine.append(key)
        with lock:
            issued.extend(mine)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(issued) == len(set(issued)) == 8 * 400
    bases = {k.split("#")[0] for k in issued}
    assert len(bases) == 15  # 3 tools x 5 argument sets, each numbered 0..n-1 without a gap
    for base in bases:
        numbers = sorted(
            int(k.split("#")[1]) if "#" in k else 0 for k in issued if k.split("#")[0] == base
        )
        assert numbers == list(range(len(numbers)))
