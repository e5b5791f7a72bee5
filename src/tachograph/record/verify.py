"""Verification of runs (SPEC section 8): pure functions over stored rows, events or lines.

:func:`verify_run` is the one check of a stored run, used by every caller (the CLI, replay,
fork, resume, the corpus and imports) so that "verified" has one strength: the chain, held
against the store's run summary. :func:`verify_lines` checks interchange lines with the same
checker. The report is a value (:class:`VerifyReport`) with a human rendering
(:meth:`VerifyReport.render`) and a JSON form (:meth:`VerifyReport.to_dict`). Check numbers are
those of SPEC section 8.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import hashlib
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..errors import ProfileError, PurposeDenied, RunNotFound, TachographError
from .canonical import (
    MAX_DEPTH,
    MAX_SAFE_INTEGER,
    DuplicateKeyError,
    canonical,
    loads,
    loads_strict,
)
from .compiled import NATIVE
from .event import ENVELOPE_KEYS, LINE_KEYS, PATTERNS, Event, EventType, envelope_bytes
from .rows import RunSummary, StoredRow
from .scan import RowScan, Scanning

__all__ = [
    "Check",
    "Failure",
    "LineChecker",
    "VerifyReport",
    "iter_jsonl_runs",
    "verify_events",
    "verify_lines",
    "verify_run",
]


class Check(enum.IntEnum):
    """The five checks of SPEC section 8, by number."""

    FORMAT = 1
    SEQUENCE = 2
    HASH = 3
    LINK = 4
    PAYLOAD = 5

    @property
    def title(self) -> str:
        """A short human name."""
        return _TITLES[self]


_TITLES = {
    Check.FORMAT: "well-formed line",
    Check.SEQUENCE: "sequence, run and tenant",
    Check.HASH: "envelope hash",
    Check.LINK: "link to previous event",
    Check.PAYLOAD: "payload digest",
}


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed check: at position ``seq`` of the run (line ``line`` of a file, if any)."""

    seq: int
    check: Check
    message: str
    line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "seq": self.seq,
            "check": int(self.check),
            "check_name": self.check.name.lower(),
            "message": self.message,
            "line": self.line,
        }


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The outcome of verifying one run.

    ``ok`` is true when every check held. ``erased`` lists the seqs whose payloads were erased
    (reported, not a failure). ``sealed`` is always false in format version 1: a hash chain
    alone cannot reveal a truncated tail or a chain rewritten end to end.
    """

    run_id: str | None
    tenant: str | None
    events: int
    failures: tuple[Failure, ...] = ()
    erased: tuple[int, ...] = ()
    head: str | None = None
    sealed: bool = False
    source: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    scanned: dict[str, Any] = field(default_factory=dict)
    """What the scans handed to the verification found, by scan name (``None`` for a scan
    that did not see the whole run): see :mod:`tachograph.record.scan`. Not in
    :meth:`to_dict`: each scan's caller says how its result reads."""

    @property
    def ok(self) -> bool:
        """True when the run verifies."""
        return not self.failures

    @property
    def status(self) -> str:
        """``"verified"`` or ``"failed"``."""
        return "verified" if self.ok else "failed"

    @property
    def first_failure(self) -> Failure | None:
        """The first failing check, by position."""
        return self.failures[0] if self.failures else None

    def to_dict(self) -> dict[str, Any]:
        """A stable JSON form (documented in docs/cli.md)."""
        first = self.first_failure
        return {
            "run_id": self.run_id,
            "tenant": self.tenant,
            "status": self.status,
            "events": self.events,
            "head": self.head,
            "first_failure": first.to_dict() if first else None,
            "failures": [f.to_dict() for f in self.failures],
            "erased": list(self.erased),
            "sealed": self.sealed,
            "source": self.source,
        }

    def render(self) -> str:
        """A paragraph a person can read."""
        name = self.run_id or "(unnamed run)"
        if self.ok:
            text = f"{name}: verified, {self.events} events, chain intact"
            if self.erased:
                text += f"; {len(self.erased)} payload(s) erased at seq {_seqs(self.erased)}"
            text += "; unsealed (no signed checkpoint: a truncated tail would not show)"
            return text
        first = self.first_failure
        assert first is not None
        where = f"seq {first.seq}" + (f" (line {first.line})" if first.line is not None else "")
        text = (
            f"{name}: FAILED at {where}, check {int(first.check)} ({first.check.title}): "
            f"{first.message}"
        )
        if len(self.failures) > 1:
            text += f" [{len(self.failures) - 1} more failure(s) after it]"
        return text


def _seqs(seqs: tuple[int, ...]) -> str:
    shown = ", ".join(str(s) for s in seqs[:10])
    return shown + (", ..." if len(seqs) > 10 else "")


def _is_int(value: Any) -> bool:
    return type(value) is int


def _check_line_format(line: Any) -> str | None:
    """Return why a parsed line is malformed (check 1), or None."""
    if type(line) is not dict:
        return "a line must be a JSON object"
    keys = line.keys()
    if keys != LINE_KEYS:
        missing = sorted(LINE_KEYS - keys)
        unknown = sorted(keys - LINE_KEYS)
        parts = []
        if missing:
            parts.append("missing key(s) " + ", ".join(missing))
        if unknown:
            parts.append("unknown key(s) " + ", ".join(unknown))
        return "; ".join(parts)
    return _check_values(line)


def _lone_surrogate(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _check_values(line: dict[str, Any]) -> str | None:
    """Check 1 on the values of a line (or of a stored event) that has all its keys."""
    if line["v"] != 1 or not _is_int(line["v"]):
        return f"v must be 1, not {line['v']!r}"
    for key in ("tenant", "run_id", "event_id", "ts", "type"):
        value = line[key]
        pattern = PATTERNS[key]
        if type(value) is not str or not pattern.fullmatch(value):
            if key == "type" and value in (EventType.HANDOFF.value, EventType.DECISION.value):
                continue
            return f"{key} {value!r} is not well formed"
    if not _is_int(line["seq"]) or not 0 <= line["seq"] <= MAX_SAFE_INTEGER:
        return f"seq {line['seq']!r} must be an integer from 0 to 2**53 - 1"
    actor = line["actor"]
    if type(actor) is not str or not 1 <= len(actor) <= 128:
        return f"actor {actor!r} must be a string of 1-128 characters"
    for key in ("actor", "idempotency_key", "model"):
        value = line[key]
        if type(value) is str and _lone_surrogate(value):
            return f"{key} {value!r} contains a lone surrogate (not valid Unicode)"
    for key, pattern in (("trace_id", PATTERNS["trace_id"]), ("span_id", PATTERNS["span_id"])):
        value = line[key]
        if value is not None and (
            type(value) is not str or not pattern.fullmatch(value) or not value.strip("0")
        ):
            return f"{key} {value!r} is not a W3C id"
    for key in ("idempotency_key", "model"):
        if line[key] is not None and type(line[key]) is not str:
            return f"{key} must be a string or null"
    seed = line["seed"]
    if seed is not None and (not _is_int(seed) or abs(seed) > 2**53 - 1):
        return f"seed {seed!r} must be an integer or null"
    for key in ("payload_digest", "hash"):
        value = line[key]
        if type(value) is not str or not PATTERNS["digest"].fullmatch(value):
            return f"{key} {value!r} is not 'sha256:' + 64 hex"
    prev = line["prev_hash"]
    if prev is not None and (type(prev) is not str or not PATTERNS["digest"].fullmatch(prev)):
        return f"prev_hash {prev!r} is not null or 'sha256:' + 64 hex"
    salt = line["salt"]
    if salt is not None and (type(salt) is not str or not PATTERNS["salt"].fullmatch(salt)):
        return f"salt {salt!r} is not 32 lower-case hex characters"
    payload = line["payload"]
    if payload is not None:
        if type(payload) is not dict:
            return "payload must be an object or null"
        try:
            canonical(payload, "payload")
        except ProfileError as exc:
            return str(exc)
    return None


@dataclass(frozen=True)
class _Begun:
    """:meth:`LineChecker.begin_many`'s page: its items, the first not yet checked, the
    compiled checks running on a thread of their own (or None), and the checker's state they
    started from (position, link, run and tenant)."""

    items: list[StoredRow | Event]
    start: int
    job: Any
    position: int
    prev: str | None
    run_id: str | None
    tenant: str | None

    def after(self) -> tuple[int, str | None] | None:
        """The position and link the page leaves when every item passes (the stored hash of
        its last item), or None where its last item has none to read."""
        last = self.items[-1] if self.items else None
        if isinstance(last, Event):
            link: Any = last.hash
        elif isinstance(last, tuple) and len(last) == 17:
            link = last[14]
        else:
            return None
        return self.position + len(self.items) - self.start, link


class LineChecker:
    """Checks the lines of one run in order (SPEC section 8), keeping only constant state.

    Feed lines with :meth:`feed`; read the report with :meth:`report`. Memory does not grow with
    the run except for the lists of failures (capped) and erased seqs.

    Each line fails at most one check (the first that fails), and a failure is reported once:
    the checks of the lines after it resynchronise. A gap in the seqs is one failure (the seqs
    missing), after which the seqs are expected to follow the line after the gap; a seq that
    repeats or comes back is one failure and leaves the expected seq and the link as they were;
    a line of another run (``run_id`` or ``tenant``) is one failure and is not part of this
    run's chain. After a line that fails check 1, the next line's link is checked against the
    ``hash`` it gives and its seq against the ``seq`` it gives, where they are readable; where
    not, that check of the next line is skipped.
    """

    def __init__(self, *, source: str | None = None, max_failures: int = 100) -> None:
        self.source = source
        self.max_failures = max_failures
        self.position = 0
        self.run_id: str | None = None
        self.tenant: str | None = None
        self.prev_recomputed: str | None = None
        self.failures: list[Failure] = []
        self.erased: list[int] = []
        self.head: str | None = None
        self.decoded = False
        """True when every event fed is a store's decoding of its row: ``payload`` is
        ``orjson.loads(payload_bytes)``, so the payload check need not parse it again."""
        # The seq the line at position ``_next_at`` must have (None: any, resynchronising on
        # it), set by the checks that are not the fast path; at any other position (the line
        # before went the fast path, where seq == position) it is the position itself.
        self._next_at = -1
        self._next_seq: int | None = None

    @property
    def next_seq(self) -> int | None:
        """The seq the next line must have, or ``None`` if any will do (after a line whose
        seq could not be read)."""
        return self._expected(self.position)

    def _expected(self, pos: int) -> int | None:
        return self._next_seq if self._next_at == pos else pos

    def _after_malformed(
        self, pos: int, run_id: Any = None, tenant: Any = None, seq: Any = None, stored: Any = None
    ) -> None:
        # The line at ``pos`` failed check 1: the next line is checked against the seq and the
        # hash this one gives, where they can be read (else those checks of the next line are
        # skipped), unless it names another run, which leaves the chain as it was.
        expected = self._expected(pos)
        self._next_at = pos + 1
        if (
            self.run_id is not None
            and type(run_id) is str
            and type(tenant) is str
            and (run_id, tenant) != (self.run_id, self.tenant)
        ):
            self._next_seq = expected
            return
        readable = _is_int(seq) and 0 <= seq <= MAX_SAFE_INTEGER
        self._next_seq = seq + 1 if readable else None
        digest = type(stored) is str and PATTERNS["digest"].fullmatch(stored) is not None
        self.prev_recomputed = stored if digest else _UNLINKED

    def _fail(self, check: Check, message: str, line: int | None) -> None:
        if len(self.failures) < self.max_failures:
            self.failures.append(Failure(self.position, check, message, line))

    def feed_malformed(self, message: str, line: int | None = None) -> None:
        """Record a line that could not even be parsed (check 1)."""
        self._fail(Check.FORMAT, message, line)
        self._after_malformed(self.position)
        self.position += 1

    def feed_missing(self, message: str) -> None:
        """Record that the event due at the current position is absent (check 2)."""
        self._fail(Check.SEQUENCE, message, None)

    def feed(self, data: dict[str, Any], line: int | None = None) -> None:
        """Check one parsed line."""
        pos = self.position
        self.position += 1
        problem = _check_line_format(data)
        if problem is not None:
            self._fail_at(pos, Check.FORMAT, problem, line)
            if type(data) is dict:
                get = data.get
                self._after_malformed(pos, get("run_id"), get("tenant"), get("seq"), get("hash"))
            else:
                self._after_malformed(pos)
            return
        if self.run_id is None:
            self.run_id, self.tenant = data["run_id"], data["tenant"]
        self._check_rest(
            pos,
            line,
            data["seq"],
            data["run_id"],
            data["tenant"],
            envelope_bytes(*(data[k] for k in ENVELOPE_KEYS)),
            data["hash"],
            data["prev_hash"],
            data["payload_digest"],
            data["payload"],
            data["salt"],
            None,
        )

    def _fail_at(self, pos: int, check: Check, message: str, line: int | None) -> None:
        if len(self.failures) < self.max_failures:
            self.failures.append(Failure(pos, check, message, line))

    def _check_rest(
        self,
        pos: int,
        line: int | None,
        seq: int,
        run_id: str,
        tenant: str,
        env_jcs: bytes,
        stored_hash: str,
        prev_hash: str | None,
        payload_digest: str,
        payload: Any,
        salt: str | None,
        payload_bytes: bytes | None,
        parsed: Any = None,
    ) -> None:
        recomputed = "sha256:" + hashlib.sha256(env_jcs).hexdigest()
        expected = self._next_seq if self._next_at == pos else pos
        self._next_at = pos + 1
        self._next_seq = expected
        if run_id != self.run_id or tenant != self.tenant:
            # a line of another run: not part of this run's chain, which goes on past it
            which, value, own = (
                ("run_id", run_id, self.run_id)
                if run_id != self.run_id
                else ("tenant", tenant, self.tenant)
            )
            self._fail_at(
                pos,
                Check.SEQUENCE,
                f"{which} is {value!r}, not the run's {own!r}: a line of another run",
                line,
            )
            return
        if expected is not None and seq < expected:
            # repeated or out of order: the run's chain goes on from the line before it
            self._fail_at(
                pos,
                Check.SEQUENCE,
                f"seq is {seq}, expected {expected}: seq {seq} again, or out of order",
                line,
            )
            return
        self._next_seq = seq + 1
        if expected is not None and seq > expected:
            # a gap, reported once: the seqs after it are expected to follow this line
            missing = (
                f"seq {expected} is missing"
                if seq == expected + 1
                else f"seqs {expected} to {seq - 1} are missing ({seq - expected} events)"
            )
            self._fail_at(
                pos, Check.SEQUENCE, f"seq is {seq}, expected {expected}: {missing}", line
            )
        elif stored_hash != recomputed:
            self._fail_at(
                pos,
                Check.HASH,
                f"hash is {stored_hash}, but the envelope hashes to {recomputed}",
                line,
            )
        elif prev_hash != (link := None if seq == 0 else self.prev_recomputed) and (
            link != _UNLINKED  # the line before is malformed and gives no hash: not checked
        ):
            self._fail_at(pos, Check.LINK, f"prev_hash is {prev_hash}, expected {link}", line)
        elif payload is None and salt is None:
            self.erased.append(pos)
        elif payload is None or salt is None:
            which = "payload" if payload is None else "salt"
            self._fail_at(
                pos,
                Check.PAYLOAD,
                f"{which} is null but the other is not: erasure must remove both",
                line,
            )
        else:
            salt_bytes = bytes.fromhex(salt)
            if payload_bytes is not None:
                actual = _stored_digest(salt_bytes, payload_bytes, parsed)
            else:
                h = hashlib.sha256(salt_bytes)
                h.update(canonical(payload, "payload"))
                actual = "sha256:" + h.hexdigest()
            if actual == _OUTSIDE:
                self._fail_at(
                    pos,
                    Check.PAYLOAD,
                    "the stored payload is not JSON of the profile (SPEC section 2), so it "
                    f"cannot digest to payload_digest {payload_digest}",
                    line,
                )
            elif actual != payload_digest:
                self._fail_at(
                    pos,
                    Check.PAYLOAD,
                    f"payload and salt digest to {actual}, but payload_digest is {payload_digest}",
                    line,
                )
        self.prev_recomputed = recomputed
        self.head = recomputed

    def feed_event(self, event: Event) -> None:
        """Check one event from a store.

        Check 1 runs on stored values too: SQLite columns are not strictly typed, and a
        tampered row must produce a report, never an exception.
        """
        if _verify_event is not None and self._at_once(
            _verify_event, event, event.tenant, event.run_id
        ):
            return
        row = _plain_row(event)
        if row is not None:
            if _verify_row is None or not self._at_once(_verify_row, row, row[0], row[1]):
                self._feed_plain(row, event.payload if self.decoded else None)
            return
        pos = self.position
        self.position += 1
        if self.run_id is None:
            self.run_id, self.tenant = event.run_id, event.tenant
        problem = _check_event_format_fully(event)
        if problem is not None:
            self._fail_at(pos, Check.FORMAT, problem, None)
            self._after_malformed(pos, event.run_id, event.tenant, event.seq, event.hash)
            return
        self._check_rest(
            pos,
            None,
            event.seq,
            event.run_id,
            event.tenant,
            event.envelope_jcs(),
            event.hash,
            event.prev_hash,
            event.payload_digest,
            event.payload_bytes if event.payload_bytes is not None else event.payload,
            event.salt,
            event.payload_bytes,
            event.payload if self.decoded else None,
        )

    def feed_row(self, row: StoredRow) -> None:
        """Check one stored row (see :class:`~tachograph.record.rows.StoredRow`) without
        building an Event. A row that is not plainly well formed takes the full path of
        :meth:`feed_event`."""
        if _verify_row is not None and self._at_once(_verify_row, row, row[0], row[1]):
            return
        if not _row_plainly_well_formed(row):
            (tenant, run_id, seq, event_id, ts, kind, actor, trace_id, span_id, key, model,
             seed, digest, prev_hash, stored_hash, body, salt) = row  # fmt: skip
            self.feed_event(
                Event(1, tenant, run_id, seq, event_id, ts, kind, actor, trace_id, span_id, key,
                      model, seed, digest, prev_hash, stored_hash, None, salt, body)
            )  # fmt: skip
            return
        self._feed_plain(row, None)

    def feed_many(self, items: list[StoredRow | Event], start: int = 0) -> None:
        """:meth:`feed_row` of each stored row and :meth:`feed_event` of each event in
        ``items`` (from ``items[start]``), in order; where the compiled helpers serve, the
        common case of a whole page in one call (``native.verify_many``), each item it cannot
        vouch for on the path its own feed takes."""
        native_many = _compiled_many()
        i, n = start, len(items)
        while i < n:
            if native_many and self.run_id is not None:
                assert _verify_many is not None
                count, last = _verify_many(
                    items, i, self.prev_recomputed, self.position, self.run_id, self.tenant
                )
                if count:
                    self.position += count
                    self.prev_recomputed = self.head = last
                    i += count
                    if i == n:
                        return
            item = items[i]
            if isinstance(item, Event):
                self.feed_event(item)
            else:
                self.feed_row(item)
            i += 1

    def begin_many(self, items: list[StoredRow | Event], after: _Begun | None = None) -> _Begun:
        """The first half of :meth:`feed_many` ``(items)``, for a caller with more to read:
        where a thread can be had (``native.verify_start``), the compiled checks of the common
        case start on it with the GIL released, and the caller reads its next page meanwhile.
        :meth:`end_many` waits for them and checks on the Python path whatever they did not
        vouch for. Pages are ended in the order they were begun, and nothing else fed between.

        ``after`` is the page begun before this one and not ended yet: the checks start from
        the state it leaves if all of its items pass (``_Begun.after``). They are only taken
        if that is the state the checker is in when this page is ended, which is exactly when
        verify_many, called then, would check the same items from the same state: the
        checks of an item read nothing else."""
        start = 0
        if after is None:
            if self.run_id is None and items:
                self.feed_many(items[:1])  # the first item names the run, on its own path
                start = 1
            state: tuple[int, str | None] | None = (self.position, self.prev_recomputed)
        else:
            state = after.after()
        job = None
        if (
            state is not None
            and _verify_start is not None
            and _compiled_many()
            and self.run_id is not None
        ):
            job = _verify_start(items, start, state[1], state[0], self.run_id, self.tenant)
        position, prev = state if state is not None else (-1, None)
        return _Begun(items, start, job, position, prev, self.run_id, self.tenant)

    def end_many(self, begun: _Begun) -> None:
        """The second half of :meth:`feed_many` (see :meth:`begin_many`)."""
        start = begun.start
        if (
            begun.job is not None
            and begun.position == self.position
            and begun.prev == self.prev_recomputed
            and begun.run_id == self.run_id
            and begun.tenant == self.tenant
        ):
            count, last = begun.job.wait()
            if count:
                self.position += count
                self.prev_recomputed = self.head = last
                start += count
        self.feed_many(begun.items, start)

    def _at_once(
        self, check: Callable[..., str | None], item: Any, tenant: Any, run_id: Any
    ) -> bool:
        """The common case of :meth:`_feed_plain` in one compiled call: ``check`` is
        ``native.verify_row`` (a stored row) or ``native.verify_event`` (a loaded event, read
        from its slots), ``tenant`` and ``run_id`` the item's own. True when every check passed
        and the item is accounted for; False (nothing changed) sends it to the Python path,
        which checks it again and reports what is wrong."""
        if self.run_id is not None:
            run_id, tenant = self.run_id, self.tenant
        recomputed = check(item, self.prev_recomputed, self.position, run_id, tenant)
        if recomputed is None:
            return False
        self.position += 1
        self.run_id, self.tenant = run_id, tenant
        self.prev_recomputed = self.head = recomputed
        return True

    def _feed_plain(self, row: tuple[Any, ...], parsed: Any) -> None:
        # a row _row_plainly_well_formed admitted; ``parsed`` is its decoded payload, if known
        (tenant, run_id, seq, event_id, ts, kind, actor, trace_id, span_id, key, model, seed,
         digest, prev_hash, stored_hash, body, salt) = row  # fmt: skip
        pos = self.position
        self.position += 1
        if self.run_id is None:
            self.run_id, self.tenant = run_id, tenant
        env = envelope_bytes(1, tenant, run_id, seq, event_id, ts, kind, actor, trace_id,
                             span_id, key, model, seed, digest, prev_hash)  # fmt: skip
        recomputed = "sha256:" + _sha256(env).hexdigest()
        if (
            recomputed == stored_hash
            and seq == pos
            and prev_hash == self.prev_recomputed
            and (pos or prev_hash is None)
            and run_id == self.run_id
            and tenant == self.tenant
            and body is not None
            and salt is not None
            and _stored_digest(bytes.fromhex(salt), body, parsed) == digest
        ):
            # every check passed (the common case): nothing to report
            self.prev_recomputed = self.head = recomputed
            return
        self._check_rest(
            pos,
            None,
            seq,
            run_id,
            tenant,
            env,
            stored_hash,
            prev_hash,
            digest,
            body,
            salt,
            body,
            parsed,
        )

    def hold_against(self, summary: RunSummary | None) -> None:
        """After the last row: hold the chain against the store's summary of the run.

        The chain alone cannot show a cut tail or a replaced last event; the summary, which a
        store writes in the same transaction as every append, can (unless it was rewritten
        too: only a seal catches that).
        """
        if self.position == 0:
            # A store lists a run only once an event of it was appended: a listed run with no
            # events lost them behind the store's back. That must not read as "verified".
            if summary is not None:
                self.run_id, self.tenant = summary.run_id, summary.tenant
                self.feed_missing("the store lists this run but holds none of its events")
            else:
                self.feed_missing("the run has no events")
            return
        if summary is None:
            return
        undecodable = _undecodable_text(summary)
        if undecodable:
            # A store writes its summaries as UTF-8 text: bytes that are not were written
            # behind its back (read back with lone surrogates standing for them).
            self._fail(
                Check.SEQUENCE,
                f"the store's run summary holds text that is not valid UTF-8 ({undecodable}): "
                "it was changed behind the store's back",
                None,
            )
        if (self.run_id, self.tenant) != (summary.run_id, summary.tenant):
            self._fail_at(
                0,
                Check.SEQUENCE,
                f"the rows are of run {self.run_id!r} in tenant {self.tenant!r}, but the "
                f"summary is of run {summary.run_id!r} in tenant {summary.tenant!r}",
                None,
            )
        elif self.position < summary.events:
            message = (
                f"the store's run summary records {summary.events} events, but "
                f"{self.position} were found"
            )
            following = self.next_seq
            if following is not None:
                message += f", the last of them seq {following - 1}"
                if following < summary.events:
                    message += ": its tail is missing"
            self.feed_missing(message)
        elif (
            self.position == summary.events and not self.failures and self.head != summary.head_hash
        ):
            self._fail_at(
                self.position - 1,
                Check.SEQUENCE,
                f"the last event hashes to {self.head}, but the store's run summary records "
                f"{summary.head_hash}: the tail was replaced",
                None,
            )

    def report(self) -> VerifyReport:
        """The report so far."""
        return VerifyReport(
            run_id=self.run_id,
            tenant=self.tenant,
            events=self.position,
            failures=tuple(self.failures),
            erased=tuple(self.erased),
            head=self.head if not self.failures else None,
            source=self.source,
        )


# The always-present string fields of an envelope, joined by "\n", in one pattern. No field
# pattern admits "\n", so a match means each field matched its own pattern exactly.
_JOINED_FIELDS = re.compile(
    "\n".join(
        f"(?:{pattern})"
        for pattern in (
            PATTERNS["tenant"].pattern,
            PATTERNS["run_id"].pattern,
            PATTERNS["event_id"].pattern,
            PATTERNS["ts"].pattern,
            PATTERNS["type"].pattern + "|handoff|decision",
            PATTERNS["digest"].pattern,
            PATTERNS["digest"].pattern,
            # prev_hash and salt, each "~" when null (a real value never is "~": the caller
            # checks that a non-null one does not take that spelling)
            PATTERNS["digest"].pattern + "|~",
            PATTERNS["salt"].pattern + "|~",
        )
    )
)
_TRACE, _SPAN, _DIGEST, _SALT = (PATTERNS[k] for k in ("trace_id", "span_id", "digest", "salt"))
# An Event's fields in StoredRow's order (Event has every one of them under the same name)
_ROW_OF = operator.attrgetter(*StoredRow._fields)
_sha256 = hashlib.sha256


def _plain_row(e: Event) -> tuple[Any, ...] | None:
    """The event's fields as a stored row (in one C call) if check 1 certainly holds; ``None``
    sends the event to the full check.

    A fast path for the common case (ASCII strings, bytes payload), so that verifying a store
    does not pay for building a dict per event. It must never admit what the full check refuses.
    """
    if e.payload_bytes is None and e.payload is not None:
        return None
    if e.v != 1 or type(e.v) is not int:
        return None
    row: tuple[Any, ...] = _ROW_OF(e)
    return row if _row_plainly_well_formed(row) else None


def _plainly_well_formed(e: Event) -> bool:
    """True only if check 1 certainly holds (see :func:`_plain_row`)."""
    return _plain_row(e) is not None


def _row_plainly_well_formed_py(r: tuple[Any, ...]) -> bool:
    """:func:`_plainly_well_formed` over a stored row (``v`` is 1 by construction). The
    compiled ``native.row_plain`` gives the same answers (tests/test_native.py) and
    serves instead when it is built."""
    (tenant, run_id, seq, event_id, ts, kind, actor, trace, span, key, model, seed, digest,
     prev, stored, body, salt) = r  # fmt: skip
    if not (
        type(tenant) is str
        and type(run_id) is str
        and type(event_id) is str
        and type(ts) is str
        and type(kind) is str
        and type(digest) is str
        and type(stored) is str
        and (prev is None or (type(prev) is str and prev != "~"))
        and (salt is None or (type(salt) is str and salt != "~"))
        and _JOINED_FIELDS.fullmatch(
            f"{tenant}\n{run_id}\n{event_id}\n{ts}\n{kind}\n{digest}\n{stored}\n"
            f"{'~' if prev is None else prev}\n{'~' if salt is None else salt}"
        )
    ):
        return False
    return (
        type(seq) is int
        and 0 <= seq <= MAX_SAFE_INTEGER
        and type(actor) is str
        and 1 <= len(actor) <= 128
        and actor.isascii()
        and (
            trace is None
            or (type(trace) is str and bool(_TRACE.fullmatch(trace)) and trace.strip("0") != "")
        )
        and (
            span is None
            or (type(span) is str and bool(_SPAN.fullmatch(span)) and span.strip("0") != "")
        )
        and (key is None or (type(key) is str and key.isascii()))
        and (model is None or (type(model) is str and model.isascii()))
        and (seed is None or (type(seed) is int and -MAX_SAFE_INTEGER <= seed <= MAX_SAFE_INTEGER))
        and (type(body) is bytes or body is None)
    )


_row_plainly_well_formed: Callable[[tuple[Any, ...]], bool] = (
    NATIVE.row_plain if NATIVE is not None else _row_plainly_well_formed_py
)


def _check_event_format(event: Event) -> str | None:
    """Check 1 for an :class:`Event` (from a store or built in memory)."""
    if _plainly_well_formed(event):
        return None
    return _check_event_format_fully(event)


def _check_event_format_fully(event: Event) -> str | None:
    line = {key: getattr(event, key) for key in ENVELOPE_KEYS}
    line["hash"] = event.hash
    line["salt"] = event.salt
    line["payload"] = None
    problem = _check_values(line)
    if problem is not None:
        return problem
    body = event.payload_bytes
    if body is not None:
        if type(body) is not bytes:
            return f"stored payload is {type(body).__name__}, not canonical JSON bytes"
    elif event.payload is not None:
        if type(event.payload) is not dict:
            return "payload must be an object or null"
        try:
            canonical(event.payload, "payload")
        except ProfileError as exc:
            return str(exc)
    return None


_OUTSIDE = "sha256:(stored payload is outside the JSON profile)"
_UNLINKED = "sha256:(the line before is malformed and its hash unreadable)"
"""``prev_recomputed`` after a line whose hash cannot be read: equal to no ``prev_hash`` (the
fast path sends the next line to the full check), and the next line's link is not checked."""


def _stored_digest_py(salt: bytes, body: bytes, parsed: Any = None) -> str:
    """The payload digest of stored JSON bytes (any key order), as check 5 reports it: the
    salted digest of the payload's JCS form, which the caller compares with the stored one.

    Only the JCS form counts (SPEC section 2): a digest over another serialization of the
    same value (orjson's ``25.0`` where JCS prints ``25``) fails. The value is parsed once
    (``parsed``, when not ``None``, is ``orjson.loads(body)`` already) and encoded by
    :func:`canonical`, whose scan of the value is what proves orjson's sorted bytes to be the
    JCS form (a proof from the bytes alone costs more: every test of them reads the whole
    payload).
    """
    try:
        value = orjson.loads(body) if parsed is None else parsed
    except orjson.JSONDecodeError:
        return _OUTSIDE
    try:
        try:
            exact = canonical(value, "payload")
        except ProfileError:
            # integers beyond 2^53 are read as doubles (SPEC section 2): loads() reads them so
            exact = canonical(loads(body), "payload")
    except Exception:
        return _OUTSIDE
    return _salted(salt, exact)


def _stored_digest_compiled(salt: bytes, body: bytes, parsed: Any = None) -> str:
    """:func:`_stored_digest_py` with the JCS bytes written from the stored bytes in one
    compiled pass (``native.jcs``, no value decoded), where it answers: it steps aside
    (None) wherever it is not certain that ``canonical(orjson.loads(body))`` gives the same
    bytes, and the Python path decides (tests/test_native_jcs.py)."""
    exact = _jcs_of_bytes(body) if type(body) is bytes else None
    if exact is None:
        return _stored_digest_py(salt, body, parsed)
    return _salted(salt, exact)


def _salted(salt: bytes, data: bytes) -> str:
    h = hashlib.sha256(salt)
    h.update(data)
    return "sha256:" + h.hexdigest()


if NATIVE is not None:
    NATIVE.bind_hash(hashlib.sha256)
_verify_row: Callable[..., str | None] | None = NATIVE.verify_row if NATIVE is not None else None
_verify_event: Callable[..., str | None] | None = (
    NATIVE.verify_event if NATIVE is not None else None
)
# verify_many stands for both, so it serves only while both are the compiled ones (the tests
# set either to None to hold the Python path to the same reports)
_VERIFY_ROW_COMPILED, _VERIFY_EVENT_COMPILED = _verify_row, _verify_event
_verify_many: Callable[..., tuple[int, Any]] | None = (
    NATIVE.verify_many if NATIVE is not None else None
)
_verify_start: Callable[..., Any] | None = NATIVE.verify_start if NATIVE is not None else None


def _compiled_many() -> bool:
    """Whether verify_many (and verify_start) may stand for verify_row and verify_event."""
    return (
        _verify_many is not None
        and _verify_row is _VERIFY_ROW_COMPILED
        and _verify_event is _VERIFY_EVENT_COMPILED
    )


_jcs_of_bytes: Callable[[bytes], bytes | None] = (
    NATIVE.jcs if NATIVE is not None else lambda _body: None
)
_stored_digest: Callable[..., str] = (
    _stored_digest_compiled if NATIVE is not None else _stored_digest_py
)


def verify_lines(lines: Iterable[dict[str, Any]], *, source: str | None = None) -> VerifyReport:
    """Verify one run given as parsed interchange lines in order."""
    checker = LineChecker(source=source)
    for number, line in enumerate(lines, 1):
        checker.feed(line, number)
    return checker.report()


def _undecodable_text(summary: RunSummary) -> str:
    """The fields of ``summary`` holding lone surrogates (bytes a store read back that are
    not UTF-8), as ``name 'value'``, or ``""``."""
    found = []
    for name in ("run_id", "tenant", "actor", "started_at", "last_at", "head_hash", "status"):
        value = getattr(summary, name, None)
        if isinstance(value, str) and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                found.append(f"{name} {value!r}")
    return ", ".join(found)


def verify_run(
    rows: Iterable[StoredRow | Event],
    summary: RunSummary | None = None,
    *,
    seals: object | None = None,
    source: str | None = None,
    max_failures: int = 100,
    progress: Callable[[int], None] | None = None,
    run_id: str | None = None,
    tenant: str | None = None,
    decoded: bool = False,
    keep: list[Any] | None = None,
    overlap: bool = False,
    scans: Sequence[RowScan] = (),
) -> VerifyReport:
    """Verify one stored run (SPEC section 8): the one meaning of "verified" everywhere.

    ``rows`` are the run's rows in seq order, as ``Store.read_rows`` streams them (the events
    of a run already loaded, e.g. for replay, are accepted too); memory stays constant.
    ``summary`` is the store's summary of the run (``Store.run_info``), read *before* the rows:
    appends only add, so a chain read after it is never shorter unless events were taken
    away. With it, a cut tail or a replaced last event fails check 2; without it (a run that
    is not in a store) only the chain is checked. A run with no rows never verifies.

    ``seals`` is reserved for the seal log (signed checkpoints, which also expose a tail cut
    together with its summary); until it exists only ``None`` is accepted. ``progress`` is
    called with the number of rows checked since its last call, at most every 1000 rows.

    If reading ``rows`` itself fails (a damaged page, a tampered row the engine cannot even
    return), the run fails check 1 with the reason, named ``run_id`` and ``tenant`` when no
    row was read; :class:`~tachograph.errors.RunNotFound` and a refused read
    (:class:`~tachograph.errors.PurposeDenied`) are raised as they are.

    ``keep``, a list, receives every row read, in order (a run loaded and verified in one
    read: ``tachograph.store.read_verified``). With ``overlap``, rows read a page at a time
    are checked on a thread of their own while the next page is read, where the compiled
    helpers can (``native.verify_start``): the same report, sooner where a core is free. A
    process among parallel verifiers has none to spare, so it is not the default.

    ``scans`` (:mod:`tachograph.record.scan`) read each page of ``rows`` too, which must then
    be stored rows; their results are the report's ``scanned`` (each ``None`` if the read
    failed part way).
    """
    if seals is not None:
        raise ValueError("verify_run: seals are not supported yet; pass seals=None")
    checker = LineChecker(source=source, max_failures=max_failures)
    checker.decoded = decoded
    scanning = Scanning(scans) if scans else None
    try:
        expected = summary.events if summary is not None else None
        _feed_rows(checker, rows, progress, keep, overlap, expected, scanning)
    except (RunNotFound, PurposeDenied):  # not a damaged run: a read that may not be made
        raise
    except (TachographError, ValueError, TypeError, OverflowError) as exc:
        # One unreadable run fails with a report; it does not stop the others (verify --all).
        if checker.run_id is None:
            checker.run_id, checker.tenant = run_id, tenant
        checker.feed_malformed(f"the store could not read this run: {exc}")
        return _scanned(checker.report(), scanning.failed() if scanning else None)
    checker.hold_against(summary)
    report = checker.report()
    return _scanned(report, scanning.joined(report.run_id) if scanning else None)


def _scanned(report: VerifyReport, scanned: dict[str, Any] | None) -> VerifyReport:
    return report if scanned is None else dataclasses.replace(report, scanned=scanned)


_CHUNK = 1000
"""Rows checked per :meth:`LineChecker.feed_many` call, and between two progress calls."""

_LAST_ROWS = 48
"""With ``overlap``, the rows of the last page at most (see :func:`_page_size`)."""


def _page_size(read: int, expected: int | None, overlap: bool) -> int:
    """How many rows to read next, ``read`` read so far of the ``expected`` (the summary's
    count, a hint only). Without ``overlap``, or without a count, ``_CHUNK``. With both, the
    pages shrink by a third each towards the end: the checks of a page are hidden behind the
    read of the next, which takes about three times as long per row, and those of the last
    page behind nothing, so it is short."""
    if not overlap or expected is None:
        return _CHUNK
    left = expected - read
    if left <= 0:
        return _CHUNK  # more rows than the summary counted: read on, the checks will say
    if left <= _LAST_ROWS:
        return left
    return min(_CHUNK, (2 * left + 2) // 3)


def _feed_rows(
    checker: LineChecker,
    rows: Iterable[StoredRow | Event],
    progress: Callable[[int], None] | None,
    keep: list[Any] | None = None,
    overlap: bool = False,
    expected: int | None = None,
    scanning: Scanning | None = None,
) -> None:
    if progress is None and isinstance(rows, list):
        checker.feed_many(rows)  # a run already loaded (replay)
        if scanning is not None:
            scanning.feed(rows)
        if keep is not None:
            keep.extend(rows)
        return
    it = iter(rows)
    # With ``overlap``, each page's compiled checks run on a thread of their own from the state
    # the page before leaves if it passes (begin_many), while the next pages are read; a page
    # is ended (end_many: waited for, its answer taken if that state was reached) once two
    # more have begun, so that at most three pages' fields are held, and the rest at the end.
    begun: collections.deque[_Begun] = collections.deque()

    def end_oldest() -> None:
        page = begun.popleft()
        checker.end_many(page)
        if progress is not None:
            progress(len(page.items))

    read = 0
    while True:
        chunk: list[StoredRow | Event] = []
        append = chunk.append
        size = _page_size(read, expected, overlap)
        try:
            for row in it:
                append(row)
                if len(chunk) == size:
                    break
        except BaseException:
            # what was read before the read failed is checked
            while begun:
                end_oldest()
            checker.feed_many(chunk)
            if keep is not None:
                keep.extend(chunk)
            raise
        if chunk:
            if keep is not None:
                keep.extend(chunk)
            if overlap:
                begun.append(checker.begin_many(chunk, begun[-1] if begun else None))
                if scanning is not None:  # while the compiled checks run on their thread
                    scanning.feed(chunk)
                while len(begun) > _IN_FLIGHT:
                    end_oldest()
            else:
                checker.feed_many(chunk)
                if scanning is not None:
                    scanning.feed(chunk)
                if progress is not None:
                    progress(len(chunk))
        read += len(chunk)
        if len(chunk) < size:
            break
    while begun:
        end_oldest()


_IN_FLIGHT = 2
"""With ``overlap``, the pages whose checks may run while the next is read."""


def verify_events(events: Iterable[Event], *, source: str | None = None) -> VerifyReport:
    """Verify one run given as :class:`Event` values in seq order, without a store's summary:
    :func:`verify_run` on the events alone (a run that is in a store is verified against its
    summary with ``tachograph.store.verify_stored``)."""
    return verify_run(events, source=source)


def _parse_line(raw: bytes | str) -> tuple[dict[str, Any] | None, str | None]:
    try:
        data = loads_strict(raw)
    except DuplicateKeyError as exc:
        return None, f"duplicate key {exc.key!r} in line"
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"not valid JSON: {exc}"
    except RecursionError:
        # Only nesting far beyond the profile's 64 levels reaches the parser's limit.
        return None, f"nested deeper than {MAX_DEPTH} levels (SPEC section 2)"
    if type(data) is not dict:
        return None, "a line must be a JSON object"
    return data, None


def iter_jsonl_runs(
    raw_lines: Iterable[bytes | str], *, source: str | None = None
) -> Iterator[tuple[LineChecker, list[dict[str, Any] | None]]]:
    """Split a JSONL stream into runs and check each; yields (checker, parsed lines).

    An export may hold several runs one after the other. A new run begins at a line of another
    run (its run id or tenant differs from the current run's) whose ``seq`` is 0, or, for a run
    whose first line(s) are missing, that does not link to the line before it (its
    ``prev_hash`` is not that line's ``hash``) and is followed by a line of its own run. Any
    other line of another run is a stray line in the current run, and fails there (check 2).
    Blank lines are skipped.
    """
    checker: LineChecker | None = None
    parsed: list[dict[str, Any] | None] = []
    before: dict[str, Any] | None = None
    lines = _parsed_lines(raw_lines)
    current = next(lines, None)
    while current is not None:
        after = next(lines, None)  # one line ahead, to tell a stray line from a run's start
        number, data, problem = current
        if checker is None or (
            data is not None
            and _starts_run(checker, data, before, after[1] if after is not None else None)
        ):
            if checker is not None:
                yield checker, parsed
            checker = LineChecker(source=source)
            parsed = []
        if data is None:
            checker.feed_malformed(problem or "malformed line", number)
            parsed.append(None)
        else:
            checker.feed(data, number)
            parsed.append(data)
        before, current = data, after
    if checker is not None:
        yield checker, parsed


def _parsed_lines(
    raw_lines: Iterable[bytes | str],
) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    for number, raw in enumerate(raw_lines, 1):
        if raw.strip():
            yield (number, *_parse_line(raw))


def _starts_run(
    checker: LineChecker,
    data: dict[str, Any],
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> bool:
    """True if ``data`` (between the parsed lines ``before`` and ``after``, ``None`` where
    there is none or it is unparseable) begins a new run rather than continuing, or straying
    into, the checker's run (see :func:`iter_jsonl_runs`)."""
    if checker.run_id is None:
        return False
    # the same run id may exist under several tenants: either one changing is another run
    key = (data.get("run_id"), data.get("tenant"))
    if key == (checker.run_id, checker.tenant):
        return False
    if data.get("seq") == 0:
        return True
    linked = (
        before is not None
        and type(before.get("hash")) is str
        and data.get("prev_hash") == before["hash"]
    )
    return not linked and after is not None and (after.get("run_id"), after.get("tenant")) == key
