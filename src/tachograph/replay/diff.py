"""Structural differences between JSON values, events and runs.

A difference is a JSON path with the old and the new value (``$.args.amount_cents: 2500 ->
3000``). Paths use ``$`` for the root, ``.key`` for identifier keys, ``["key"]`` otherwise and
``[i]`` for list positions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from ..record.event import Event, EventType

__all__ = [
    "MISSING",
    "Change",
    "RunDiff",
    "diff_events",
    "diff_runs",
    "diff_values",
    "string_region",
]


class _Missing:
    """Marks a key or position present on one side only."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<missing>"

    def __bool__(self) -> bool:
        return False


MISSING: Any = _Missing()
"""The value on the side where a key or position does not exist."""


@dataclass(frozen=True, slots=True)
class Change:
    """One difference: at ``path``, ``old`` (recorded) became ``new`` (now)."""

    path: str
    old: Any
    new: Any

    def to_dict(self) -> dict[str, Any]:
        """JSON form: a side that is absent (the path exists on one side only) is left out
        and named in ``absent`` (``["old"]`` or ``["new"]``); any value, ``{"missing":
        true}`` included, is a value that was there."""
        out: dict[str, Any] = {"path": self.path}
        absent = []
        for side, value in (("old", self.old), ("new", self.new)):
            if value is MISSING:
                absent.append(side)
            else:
                out[side] = value
        if absent:
            out["absent"] = absent
        return out

    def render(self) -> str:
        """``path: old -> new`` with values shortened for a terminal. Two long strings show
        the region that changed, with context and its offsets, rather than a common prefix
        cut short on both sides."""
        if isinstance(self.old, str) and isinstance(self.new, str):
            region = string_region(self.old, self.new)
            if region is not None:
                return f"{self.path}: {region}"
        return f"{self.path}: {_short(self.old)} -> {_short(self.new)}"


_CONTEXT = 24
"""Characters of unchanged text shown on each side of a changed region."""


def string_region(old: str, new: str, *, limit: int = 80) -> str | None:
    """The changed region of two strings with context and offsets, or None when both are
    short enough to show whole."""
    if _short(old, limit + 1) == _short(old) and _short(new, limit + 1) == _short(new):
        return None
    start = 0
    shortest = min(len(old), len(new))
    while start < shortest and old[start] == new[start]:
        start += 1
    end = 0  # length of the common suffix, not overlapping the prefix
    while end < shortest - start and old[-1 - end] == new[-1 - end]:
        end += 1
    old_end, new_end = len(old) - end, len(new) - end

    def excerpt(text: str, stop: int) -> str:
        lo = max(0, start - _CONTEXT)
        hi = min(len(text), stop + _CONTEXT)
        changed = text[start:stop]
        if len(changed) > 2 * limit:
            changed = changed[:limit] + "\u2026" + changed[-limit:]
        body = json.dumps(text[lo:start], ensure_ascii=False)[1:-1]
        body += "[" + json.dumps(changed, ensure_ascii=False)[1:-1] + "]"
        body += json.dumps(text[stop:hi], ensure_ascii=False)[1:-1]
        return ("..." if lo else "") + '"' + body + '"' + ("..." if hi < len(text) else "")

    return (
        f"{excerpt(old, old_end)} -> {excerpt(new, new_end)} "
        f"(changed at characters {start}..{old_end} of {len(old)} -> {start}..{new_end} "
        f"of {len(new)})"
    )


def _short(value: Any, limit: int = 80) -> str:
    if value is MISSING:
        return "(absent)"
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{json.dumps(key)}]"


def _same_number(a: Any, b: Any) -> bool:
    # 1 and 1.0 are the same JSON number (JCS prints both as 1); True is not 1.
    return type(a) in (int, float) and type(b) in (int, float) and a == b


def diff_values(old: Any, new: Any, path: str = "$", *, limit: int = 50) -> list[Change]:
    """Every difference between two JSON values, depth first, at most ``limit`` of them."""
    try:
        # the common case in replay: equal values. Equal sorted bytes mean equal types and
        # values everywhere (True, 1 and 1.0 print differently), which is what _diff needs.
        if orjson.dumps(old, option=_SORTED) == orjson.dumps(new, option=_SORTED):
            return []
    except (TypeError, orjson.JSONEncodeError):
        pass  # not plain JSON values: walk them
    out: list[Change] = []
    _diff(old, new, path, out, limit)
    return out


# Anything but plain JSON types (a dataclass, a datetime, a str subclass, a non-str key)
# makes dumps raise, and the walk decides. Both sides are in the JSON profile where replay
# compares them (NaN, which orjson would print as null, is refused before that).
_SORTED = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def _diff(old: Any, new: Any, path: str, out: list[Change], limit: int) -> None:
    if len(out) >= limit:
        return
    if type(old) is dict and type(new) is dict:
        for key in old:
            if key not in new:
                out.append(Change(_child(path, key), old[key], MISSING))
            else:
                _diff(old[key], new[key], _child(path, key), out, limit)
            if len(out) >= limit:
                return
        for key in new:
            if key not in old:
                out.append(Change(_child(path, key), MISSING, new[key]))
                if len(out) >= limit:
                    return
        return
    if type(old) is list and type(new) is list:
        for i in range(max(len(old), len(new))):
            a = old[i] if i < len(old) else MISSING
            b = new[i] if i < len(new) else MISSING
            if a is MISSING or b is MISSING:
                out.append(Change(f"{path}[{i}]", a, b))
            else:
                _diff(a, b, f"{path}[{i}]", out, limit)
            if len(out) >= limit:
                return
        return
    if old is new or (type(old) is type(new) and old == new) or _same_number(old, new):
        return
    out.append(Change(path, old, new))


_COMPARED = ("type", "actor", "idempotency_key", "model", "seed")


_DEFAULT_KEY = re.compile(r"(?P<name>.*):[0-9a-f]{16}(?P<repeat>#[0-9]+)?")


def _key_part(event: Event) -> str | None:
    """What an idempotency key says of the call, comparable across runs.

    The ``{run_id}:`` prefix is dropped. A default key's hash part is keyed by its own run's
    secret (SPEC section 5), so two runs hash the same arguments differently: only the name
    and the repeat count of a default key are compared (the arguments are compared in the
    payload). A tool's own key is compared whole.
    """
    key = event.idempotency_key
    prefix = event.run_id + ":"
    if key is not None and key.startswith(prefix):
        key = key[len(prefix) :]
    if key is not None:
        default = _DEFAULT_KEY.fullmatch(key)
        if default is not None:
            return f"{default['name']}:{default['repeat'] or ''}"
    return key


def diff_events(old: Event, new: Event) -> list[Change]:
    """Differences between two events' meaningful fields and payloads.

    Ids, timestamps, hashes, salts, run ids and trace context are expected to differ between
    runs and are not compared; idempotency keys are compared without their run id prefix.
    """
    changes = []
    for name in _COMPARED:
        if name == "idempotency_key":
            differs = _key_part(old) != _key_part(new)
        else:
            differs = getattr(old, name) != getattr(new, name)
        if differs:
            changes.append(Change(f"$.{name}", getattr(old, name), getattr(new, name)))
    if old.erased or new.erased:
        if old.erased != new.erased:
            changes.append(
                Change(
                    "$.payload",
                    "(erased)" if old.erased else old.payload,
                    "(erased)" if new.erased else new.payload,
                )
            )
        return changes
    changes.extend(diff_values(old.payload, new.payload, "$.payload"))
    return changes


@dataclass(frozen=True, slots=True)
class RunDiff:
    """The first step where two runs differ (``seq`` is ``None`` when they do not)."""

    run_a: str
    run_b: str
    seq: int | None
    event_a: Event | None
    event_b: Event | None
    changes: tuple[Change, ...]
    events_a: int
    events_b: int

    @property
    def same(self) -> bool:
        """True when the runs record the same steps."""
        return self.seq is None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "run_a": self.run_a,
            "run_b": self.run_b,
            "same": self.same,
            "seq": self.seq,
            "type_a": self.event_a.type if self.event_a else None,
            "type_b": self.event_b.type if self.event_b else None,
            "changes": [c.to_dict() for c in self.changes],
            "events_a": self.events_a,
            "events_b": self.events_b,
        }

    def render(self) -> str:
        """A few lines a person can read."""
        if self.same:
            return f"{self.run_a} and {self.run_b} record the same {self.events_a} steps"
        a = self.event_a.type if self.event_a else "(nothing: run ended)"
        b = self.event_b.type if self.event_b else "(nothing: run ended)"
        lines = [f"first difference at seq {self.seq}: {a} in {self.run_a}, {b} in {self.run_b}"]
        lines.extend("  " + c.render() for c in self.changes)
        return "\n".join(lines)


def _own_labels(payload: dict[str, Any]) -> Any:
    """The caller's labels; ``tachograph.*`` labels say how a run was made (a fork, a dry
    run), which the steps themselves show."""
    labels = payload.get("labels", {})
    if not isinstance(labels, dict):
        return labels
    return {k: v for k, v in labels.items() if not str(k).startswith("tachograph.")}


def diff_runs(
    a: Iterable[Event], b: Iterable[Event], *, names: tuple[str, str] = ("a", "b")
) -> RunDiff:
    """Compare two runs step by step; report the first step that differs.

    ``run.started`` is compared on its input and the caller's labels only (its fingerprint and
    parent differ between any two runs by nature; replay reports environment drift separately).
    """
    ia, ib = iter(a), iter(b)
    seq = 0
    count_a = count_b = 0
    while True:
        ea = next(ia, None)
        eb = next(ib, None)
        count_a += ea is not None
        count_b += eb is not None
        if ea is None and eb is None:
            return RunDiff(names[0], names[1], None, None, None, (), count_a, count_b)
        if ea is None or eb is None:
            changes = (Change("$", ea.type if ea else MISSING, eb.type if eb else MISSING),)
            count_a += sum(1 for _ in ia)
            count_b += sum(1 for _ in ib)
            return RunDiff(names[0], names[1], seq, ea, eb, changes, count_a, count_b)
        if ea.type == EventType.RUN_STARTED.value and eb.type == EventType.RUN_STARTED.value:
            pa, pb = ea.payload or {}, eb.payload or {}
            changes_list = diff_values(
                {"input": pa.get("input"), "labels": _own_labels(pa)},
                {"input": pb.get("input"), "labels": _own_labels(pb)},
                "$.payload",
            )
        else:
            changes_list = diff_events(ea, eb)
        if changes_list:
            count_a += sum(1 for _ in ia)
            count_b += sum(1 for _ in ib)
            return RunDiff(names[0], names[1], seq, ea, eb, tuple(changes_list), count_a, count_b)
        seq += 1
