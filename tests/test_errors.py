"""One error tree under TachographError, drawn in errors.py's docstring, carrying data."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tachograph
from tachograph import errors
from tachograph.errors import (
    DuplicateConflict,
    EventError,
    ProfileError,
    RunNotFound,
    SequenceConflict,
    StoreNotFound,
    TachographError,
)
from tachograph.record.event import new_event
from tachograph.store import SQLiteStore
from tachograph.testing import build_run

_TREE_LINE = re.compile(r"^(?P<indent>[│ ]*)(?:├── |└── )?(?P<name>[A-Z]\w+)\b")


def _drawn_tree() -> dict[str, str | None]:
    """``{class name: parent name}`` as drawn in the module docstring."""
    doc = errors.__doc__ or ""
    block = doc[doc.index("TachographError\n") :].split("\n\n")[0]
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        match = _TREE_LINE.match(line.strip("\n").removeprefix("    "))
        assert match, f"unreadable line in the drawing: {line!r}"
        depth = len(match["indent"]) // 4 + (1 if ("├──" in line or "└──" in line) else 0)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[match["name"]] = stack[-1][1] if stack else None
        stack.append((depth, match["name"]))
    return parents


def test_every_error_is_drawn_in_the_docstring_and_is_a_tachograph_error() -> None:
    drawn = _drawn_tree()
    assert set(drawn) == set(errors.__all__)
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert isinstance(cls, type)
        assert issubclass(cls, TachographError), name
        assert issubclass(cls, Exception)


def test_the_drawing_matches_the_class_hierarchy() -> None:
    for name, parent in _drawn_tree().items():
        cls = getattr(errors, name)
        nearest = next(
            b for b in cls.__mro__[1:] if b.__module__ == errors.__name__ or b is Exception
        )
        if parent is None:
            assert cls is TachographError
        else:
            assert nearest.__name__ == parent, f"{name} is drawn under {parent}, not {nearest}"


def test_every_exception_the_package_exports_is_in_the_tree() -> None:
    exported = {
        name
        for name in tachograph.__all__
        if isinstance(getattr(tachograph, name), type)
        and issubclass(getattr(tachograph, name), BaseException)
        and not issubclass(getattr(tachograph, name), Warning)
    }
    assert exported <= set(errors.__all__)


def test_fields_become_attributes() -> None:
    err = SequenceConflict("nope", run_id="r", seq=3, expected={"seq": 2}, actual={"seq": 3})
    assert (err.run_id, err.seq, err.expected, err.actual) == ("r", 3, {"seq": 2}, {"seq": 3})
    assert err.fields == {"run_id": "r", "seq": 3, "expected": {"seq": 2}, "actual": {"seq": 3}}
    assert str(err) == "nope"
    assert TachographError("plain").run_id is None
    assert TachographError("plain").seq is None


def test_errors_are_also_the_builtin_kind_callers_expect() -> None:
    assert issubclass(ProfileError, TypeError)
    assert issubclass(EventError, ValueError)
    assert issubclass(RunNotFound, KeyError)
    assert str(RunNotFound("no run 'x'", run_id="x")) == "no run 'x'"  # not KeyError's repr


def test_raised_errors_carry_their_data(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    try:
        events = build_run("run-a", 3)
        store.append(events[:2])
        with pytest.raises(SequenceConflict) as seq_info:
            store.append(build_run("run-a", 1, after=(2, events[2].hash)))
        assert (seq_info.value.run_id, seq_info.value.seq) == ("run-a", 3)
        assert seq_info.value.expected == {"seq": 2, "prev_hash": events[1].hash}
        with pytest.raises(DuplicateConflict) as dup_info:
            store.append(build_run("run-a", 1))
        assert (dup_info.value.run_id, dup_info.value.seq) == ("run-a", 0)
        assert (dup_info.value.expected, dup_info.value.actual) != (None, None)
        with pytest.raises(RunNotFound) as missing:
            store.run_info("run-b")
        assert missing.value.run_id == "run-b"
        assert missing.value.suggestions == ["run-a"]
    finally:
        store.close()
    with pytest.raises(StoreNotFound) as where:
        SQLiteStore(tmp_path / "none.db", create=False)
    assert where.value.location == str(tmp_path / "none.db")
    with pytest.raises(EventError) as field:
        new_event(run_id="bad id", seq=0, type="a.b", actor="x", payload={}, prev_hash=None)
    assert (field.value.field, field.value.value) == ("run_id", "bad id")
    with pytest.raises(ProfileError) as path:
        new_event(run_id="r", seq=0, type="a.b", actor="x", payload={"a": [{1}]}, prev_hash=None)
    assert path.value.path == "payload.a[0]"


def test_suggestions_for_an_unknown_run_stay_cheap_in_a_large_store() -> None:
    """A short id that prefixes every run, or a typo among 300,000 ids: five suggestions,
    prefixes first in the order given, found without comparing every id with every other
    (the list of prefixed ids grew to the whole store, each checked against the list so far:
    minutes for 100,000 runs) and with difflib over the 200 ids nearest in sorted order only
    (1.9 s over every id of 300,000)."""
    from tachograph.store import base

    pool = [f"run_{i:08d}_abcdef" for i in range(300_000)]
    compared = 0
    real = base.difflib.SequenceMatcher

    class Counting(real):  # type: ignore[misc, valid-type]
        def set_seq1(self, a: object) -> None:
            nonlocal compared
            compared += 1
            super().set_seq1(a)

    base.difflib.SequenceMatcher = Counting  # type: ignore[misc]
    try:
        assert base.suggest("run_", pool) == pool[:5]
        assert base.suggest("run_00123456", pool)[0] == "run_00123456_abcdef"
        typo = base.suggest("run_0012345x_abcdef", pool)
    finally:
        base.difflib.SequenceMatcher = real  # type: ignore[misc]
    assert len(typo) == 5
    assert all(t.startswith("run_00123") for t in typo)
    # three calls, each comparing at most the 200 nearest ids (difflib sets seq1 once a
    # candidate)
    assert compared <= 3 * (2 * base.NEIGHBOURS + 1)
    # a small store lies within the neighbours: the best spelling wins wherever it sorts
    assert base.suggest("rnu_00000007_abcdef", pool[:50])[0] == "run_00000007_abcdef"


class _Counted(str):
    equalities = 0

    def __eq__(self, other: object) -> bool:
        _Counted.equalities += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_a_short_id_that_prefixes_every_run_is_answered_in_a_few_comparisons() -> None:
    from tachograph.store import base

    pool = [_Counted(f"run_{i:06d}") for i in range(2_000)]
    _Counted.equalities = 0
    assert base.suggest("run_", pool) == pool[:5]
    # five kept, each new one checked against those before it (the whole store was kept
    # before, each against all before it: about two million comparisons here)
    assert _Counted.equalities < 100


def test_suggestions_skip_ids_that_are_not_text() -> None:
    # a tampered SQLite row may hold a number or bytes as its run id: the error for an
    # unknown run must still be made
    from tachograph.store import base

    pool: list[object] = ["run-alpha", 7, b"run-beta", "run-alpine", None]
    assert base.suggest("run-alp", pool) == ["run-alpha", "run-alpine"]  # type: ignore[arg-type]
    many: list[object] = [f"run-{i:04d}" for i in range(300)] + [3, b"x"]
    assert base.suggest("run-01", many)[0] == "run-0100"  # type: ignore[arg-type]


@pytest.mark.parametrize("engine", ["sqlite", "memory"])
def test_an_event_id_taken_in_another_tenant_names_the_refused_event_s_tenant(
    engine: str, tmp_path: Path
) -> None:
    """SQLite and the memory store hold event ids unique across tenants (PostgreSQL within
    one): the refusal carries the tenant of the event refused, not of the one stored."""
    from tachograph.store import MemoryStore

    store = SQLiteStore(tmp_path / "s.db") if engine == "sqlite" else MemoryStore()
    try:
        stored = build_run("run-a", 1, tenant="globex")
        store.append(stored)
        clash = new_event(
            run_id="run-b",
            seq=0,
            type="run.started",
            actor="agent",
            payload={"input": "x"},
            prev_hash=None,
            event_id=stored[0].event_id,
            tenant="acme",
        )
        with pytest.raises(DuplicateConflict) as info:
            store.append([clash])
        assert (info.value.run_id, info.value.tenant) == ("run-b", "acme")
    finally:
        store.close()
