"""Erasure on request: null payloads and salts (SPEC section 4) without breaking the chain.

:func:`erase` picks the events (by seq, by type, by data subject), asks the store to erase
them (the store writes the audit record in the same transaction and scrubs its files), and
reports what was erased now. Erasing again erases nothing more and records nothing more.
A data subject's erasure also erases the ``run.started`` payload of every run it touches: that
payload holds the run's key secret, without which the idempotency keys reveal nothing (SPEC
section 5).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import PrivacyError, RecordingError, RunNotFound
from ..record.canonical import loads
from ..record.event import Event, EventType
from ..store import open_store
from ..store.audit import AuditEntry
from ..store.base import Store
from .audit import current_actor
from .blobs import BLOB_KEY, BlobStore, refs_in

if TYPE_CHECKING:  # the privacy package compiles its detectors when imported: when needed
    from ..privacy.keys import KeyRing

__all__ = [
    "SUBJECT_WITHHELD",
    "ErasureReport",
    "RunErasure",
    "SubjectRule",
    "erase",
    "link_subject",
    "subject_id",
    "subject_ids",
    "subject_in_audit",
]


@dataclass(frozen=True, slots=True)
class RunErasure:
    """What one run had picked and what was erased now."""

    tenant: str
    run_id: str
    seqs: tuple[int, ...]
    """The seqs picked for erasure (already erased ones included)."""
    erased: int
    """How many of them were erased by this call."""
    blobs: int = 0
    """Blobs the erased payloads referenced (SPEC section 6) deleted by this call."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "tenant": self.tenant,
            "run_id": self.run_id,
            "seqs": list(self.seqs),
            "erased": self.erased,
            "blobs": self.blobs,
        }


@dataclass(frozen=True, slots=True)
class ErasureReport:
    """The result of :func:`erase`."""

    reason: str
    actor: str
    runs: tuple[RunErasure, ...]
    subject: str | None = None

    @property
    def erased(self) -> int:
        """Payloads erased by this call, over every run."""
        return sum(r.erased for r in self.runs)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "reason": self.reason,
            "actor": self.actor,
            "subject": self.subject,
            "erased": self.erased,
            "runs": [r.to_dict() for r in self.runs],
        }


def _picked(
    events: Iterable[Event], seqs: set[int], types: Sequence[str], everything: bool
) -> list[int]:
    return [
        e.seq
        for e in events
        if everything or e.seq in seqs or any(fnmatch.fnmatchcase(e.type, t) for t in types)
    ]


def _tenant_of(store: Store, run_id: str, tenant: str | None) -> str:
    return store.run_info(run_id, tenant=tenant).tenant


def erase(
    store: Store | str | os.PathLike[str],
    run_id: str | None = None,
    *,
    reason: str,
    seqs: Iterable[int] = (),
    types: Sequence[str] = (),
    subject: str | None = None,
    tenant: str | None = None,
    actor: str | None = None,
    blobs: BlobStore | None = None,
    keys: KeyRing | None = None,
) -> ErasureReport:
    """Erase payloads and salts; return what was erased.

    * ``run_id`` with ``seqs`` and/or ``types`` (``fnmatch`` patterns such as ``model.*``):
      those events of that run; with neither, every payload of the run.
    * ``subject``: every event linked to that data subject (:func:`link_subject`,
      :class:`SubjectRule`), in every run of ``tenant`` (the store's tenant, or ``"default"``,
      if not given) or only in ``run_id``, plus each such run's ``run.started`` payload (its
      key secret), the answer to each linked request (its completion: what the tool or the
      model returned about the person) and the run's ``run.finished`` (its output). The id
      is looked for as given and as its keyed token under each key of ``keys`` (what a
      redactor links when the rule's path held redacted data). ``seqs`` or ``types`` narrow
      it to those linked events (and ``run.started``) alone, and then keep the links, so
      that a later erasure of the subject still finds the rest.

    ``store`` is a store or a path or URL (opened, and closed again, here). ``reason`` is
    required and goes into the store audit with ``actor`` (default: the operating-system
    user, or ``TACHOGRAPH_ACTOR``) and the erased seqs. A subject's erasure also removes the
    subject's links to the erased events (in the same transaction), and its audit records
    name the subject by the keyed token of the id as given under ``keys`` (by default the
    ring the environment configures, see :meth:`KeyRing.from_env`; what a token ``Rule``
    gives that value), or as ``[redacted:subject]`` when there is no key: the record of an
    erasure must not hold what was erased. Without a key, a subject (not named by its token)
    in a tenant that links subjects under keyed tokens raises
    :class:`~tachograph.errors.PrivacyError` and erases nothing: its links may be its token.

    The blobs an erased payload references are deleted too (``blobs``, by default the folder
    beside a store file, when there is one): the reference was the payload's, the content is
    the data. A blob is content-addressed, so another run holding the same content loses it
    as well, and reports it expired, not failed (SPEC section 6).
    """
    if not reason or not reason.strip():
        raise RecordingError("an erasure needs a reason (it is recorded in the store audit)")
    if not isinstance(store, Store):
        with open_store(store, create=False) as opened:
            return erase(
                opened,
                run_id,
                reason=reason,
                seqs=seqs,
                types=types,
                subject=subject,
                tenant=tenant,
                actor=actor,
                blobs=blobs,
                keys=keys,
            )
    who = actor or current_actor()
    named = None
    ring = keys
    if subject is not None:
        subject = subject_id(subject)
        from ..privacy.keys import KeyRing

        ring = keys or KeyRing.from_env()
        named = subject_in_audit(subject, ring)
    wanted = {int(s) for s in seqs}
    plan: list[tuple[str, str, list[int], list[Event], tuple[str, ...]]] = []
    if subject is not None:
        scope = tenant or (
            _tenant_of(store, run_id, None) if run_id else (store.tenant or "default")
        )
        if ring is None:
            _refuse_without_key(store, scope, subject)
        by_run: dict[str, dict[str, set[int]]] = {}
        for sid in subject_ids(subject, ring):
            for linked_run, seq in store.subject_events(scope, sid):
                if run_id is None or linked_run == run_id:
                    by_run.setdefault(linked_run, {}).setdefault(sid, set()).add(seq)
        for linked_run, per_id in sorted(by_run.items()):
            linked = {0}.union(*per_id.values())
            try:
                events = list(store.read(linked_run, tenant=scope, decode=False))
            except RunNotFound:
                # a link to a run the store does not hold (a crash between a rule's link and
                # the run's first commit, or a hand-made link): nothing to erase there, and
                # the link, which names the person, goes
                plan.append((scope, linked_run, sorted(linked), [], tuple(sorted(per_id))))
                continue
            unlink: tuple[str, ...] = ()
            if wanted or types:  # narrowed further by seq or type: the links stay
                if run_id is not None:
                    _refuse_missing(linked_run, scope, events, wanted)
                narrowed = set(_picked(events, wanted, types, False)) & linked
                if not narrowed:
                    continue  # no linked event is picked: run.started alone is not erased
                linked = narrowed | {0}
            else:
                linked |= _consequences(events, linked)
                unlink = tuple(sorted(per_id))
            plan.append((scope, linked_run, sorted(linked), events, unlink))
    elif run_id is not None:
        info = store.run_info(run_id, tenant=tenant)
        events = list(store.read(info.run_id, tenant=info.tenant, decode=False))
        _refuse_missing(info.run_id, info.tenant, events, wanted)
        everything = not wanted and not types
        picked = _picked(events, wanted, types, everything)
        plan.append((info.tenant, info.run_id, picked, events, ()))
    else:
        raise RecordingError("name a run, a data subject, or both")
    if not plan:
        # nothing linked (any more): a subject erased before whose scrub could not finish
        # (readers held the -wal) is finished by running the erasure again, as a run's is
        store.scrub()
    folder = blobs if blobs is not None else _blobs_beside(store)
    results = []
    for run_tenant, target, picked, events, unlink in plan:
        detail: dict[str, Any] = {"reason": reason}
        if named is not None:
            detail["subject"] = named
        referenced = _referenced(events, picked) if folder else []
        entry = AuditEntry(action="erase", actor=who, tenant=run_tenant, detail=detail)
        # a subject's id in each form it is linked under: one transaction, one record
        count = store.erase(run_tenant, target, picked, audit=entry, unlink=unlink or None)
        deleted = sum(folder.delete(d) for d in referenced) if folder else 0
        results.append(RunErasure(run_tenant, target, tuple(picked), count, deleted))
    return ErasureReport(reason=reason, actor=who, runs=tuple(results), subject=subject)


def _refuse_missing(run_id: str, tenant: str, events: Sequence[Event], wanted: set[int]) -> None:
    """Raise :class:`RunNotFound` (with ``seq``) if ``wanted`` names a seq the run lacks."""
    missing = sorted(wanted - {e.seq for e in events})
    if missing:
        raise RunNotFound(
            f"run {run_id!r} has no event at seq {', '.join(map(str, missing))} "
            f"(it has seq 0..{len(events) - 1}); nothing was erased",
            run_id=run_id,
            tenant=tenant,
            seq=missing[0],
        )


def subject_id(subject: Any) -> str:
    """A data-subject id as links hold it (a rule links an integer as its text), refused
    when it is empty or cannot be written as UTF-8 (a lone surrogate from a bad argv)."""
    text = str(subject)
    if not text:
        raise RecordingError("a data-subject id must not be empty")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RecordingError(
            f"data-subject id {text!r} is not valid Unicode (a lone surrogate)"
        ) from exc
    return text


def _refuse_without_key(store: Store, tenant: str, subject: str) -> None:
    """Raise :class:`PrivacyError` when no key is configured but ``tenant`` links data subjects
    under keyed tokens: the subject may be linked so, and an erasure that finds only the id as
    given would report a subject whose data it never looked for as erased, or as absent."""
    from ..privacy.keys import TOKEN_PATTERN

    if TOKEN_PATTERN.fullmatch(subject):
        return  # named by its token: found as it is
    key_ids = store.subject_key_ids(tenant)
    if key_ids:
        named = ", ".join(repr(k) for k in sorted(key_ids))
        raise PrivacyError(
            f"no PII key is configured, and tenant {tenant!r} links data subjects under keyed "
            f"tokens (key id {named}): the subject's links may be its token, which only the "
            "key finds. Configure the key the runs were recorded with (TACHOGRAPH_PII_KEY or "
            "TACHOGRAPH_PII_KEY_FILE; keys= in Python), or name the subject by its token; "
            "nothing was erased",
            key_id=min(key_ids),
        )


def subject_ids(subject: str, keys: KeyRing | None) -> list[str]:
    """The forms a data subject's id may be linked under: as given, and, under each key of
    ``keys``, its keyed token (what a token ``Rule`` stores) and what the personal-data
    detectors make of it (an e-mail's token is of the address in lower case)."""
    ids = [subject]
    if keys is None:
        return ids
    from ..privacy.keys import TOKEN_PATTERN
    from ..privacy.redactor import Redactor, pii_policy, under_every_key

    if TOKEN_PATTERN.fullmatch(subject):
        return ids
    for (redactor,) in under_every_key((pii_policy(keys),)):
        assert isinstance(redactor, Redactor)
        for form in (redactor.token(subject), redactor.redact_text(subject)):
            # a secret's marker is the same for everyone: a form holding one would find
            # other people's links (two access key ids both read "[redacted:secret:aws]")
            if "[redacted:" not in form and form not in ids:
                ids.append(form)
    return ids


SUBJECT_WITHHELD = "[redacted:subject]"
"""How an erasure's audit record names its data subject when no key is configured."""


def subject_in_audit(subject: str, keys: KeyRing | None) -> str:
    """How the store audit names a data subject whose data is being erased: the keyed token
    of the id as given (``KeyRing.token(id)``, ``pii1:<key id>:<16 hex>``, which the key's
    holder can compute again to find the record of a request), the id as it is when it is
    such a token and nothing else (a rule linked the redacted value), or
    :data:`SUBJECT_WITHHELD` without a key."""
    from ..privacy.keys import TOKEN_PATTERN

    if TOKEN_PATTERN.fullmatch(subject):
        return subject
    return keys.token(subject) if keys is not None else SUBJECT_WITHHELD


def _blobs_beside(store: Store) -> BlobStore | None:
    path = getattr(store, "path", None)
    if not isinstance(path, str) or path == ":memory:":
        return None
    folder = BlobStore.beside(store)
    return folder if folder.root.is_dir() else None


def _referenced(events: Sequence[Event], seqs: Sequence[int]) -> list[str]:
    """The blob digests the still-present payloads at ``seqs`` reference (``events`` as read
    for the plan, undecoded: only the payloads picked are parsed)."""
    wanted = set(seqs)
    digests: dict[str, None] = {}
    for event in events:
        if event.seq in wanted and event.payload_bytes is not None:
            for _path, ref in refs_in(loads(event.payload_bytes)):
                digests[ref[BLOB_KEY]] = None
    return list(digests)


_REQUESTS = frozenset({EventType.TOOL_REQUESTED.value, EventType.MODEL_REQUEST.value})
_COMPLETIONS = frozenset(
    {
        EventType.TOOL_COMPLETED.value,
        EventType.TOOL_FAILED.value,
        EventType.MODEL_RESPONSE.value,
        EventType.MODEL_FAILED.value,
    }
)


def _consequences(events: Sequence[Event], linked: set[int]) -> set[int]:
    """What a subject's linked events bring with them: the answer to each linked request
    (the completion with the same idempotency key: what a tool returned about the person),
    and the run's ``run.finished`` (its output is made of those answers)."""
    keys = {
        e.idempotency_key
        for e in events
        if e.seq in linked and e.type in _REQUESTS and e.idempotency_key is not None
    }
    out = {e.seq for e in events if e.type in _COMPLETIONS and e.idempotency_key in keys}
    out.update(e.seq for e in events if e.type == EventType.RUN_FINISHED.value)
    return out


def link_subject(
    store: Store,
    run_id: str,
    subject: str,
    *,
    seqs: Iterable[int] | None = None,
    tenant: str = "default",
) -> int:
    """Link events of a run (every event so far when ``seqs`` is ``None``) to a data subject,
    so that ``erase(store, subject=...)`` finds them; returns how many links are new."""
    subject = subject_id(subject)
    if seqs is None:
        picked = [e.seq for e in store.read(run_id, tenant=tenant, decode=False)]
    else:
        store.run_info(run_id, tenant=tenant)  # a link to a run the store lacks is refused
        picked = list(seqs)
    return store.link_subjects(tenant, run_id, [(seq, subject) for seq in picked])


_Path = tuple[str, ...]


def _parse_path(path: str) -> _Path:
    text = path[2:] if path.startswith("$.") else path
    parts = tuple(p for p in text.split(".") if p)
    if not parts:
        raise RecordingError(f"subject path {path!r} names no key")
    return parts


def _at(value: Any, path: _Path) -> Any:
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


class SubjectRule:
    """A recording listener that links each event to the data subjects named in it.

    ``paths`` are payload paths (``$.args.customer_id``, ``input.user``); a string or integer
    found there is a subject id. ``types`` limits the rule to event types (``fnmatch``
    patterns). Pass it as ``record(..., listeners=[SubjectRule(store, paths=[...])])``; links
    go to the store as each event is recorded, so one :func:`erase` by subject finds the
    person's events across runs.
    """

    def __init__(
        self,
        store: Store,
        *,
        paths: Sequence[str],
        types: Sequence[str] = ("*",),
        subject: Callable[[Any], str | None] | None = None,
    ) -> None:
        if not isinstance(store, Store):  # a listener's failure is logged, not raised: say it now
            raise RecordingError(
                "SubjectRule needs the open store the recording writes to, not a "
                f"{type(store).__name__}: "
                "store = tachograph.open_store(PATH); SubjectRule(store, paths=[...]); "
                "tachograph.record(store, ..., listeners=[rule])"
            )
        self.store = store
        self.paths = tuple(_parse_path(p) for p in paths)
        self.types = tuple(types)
        self.subject = subject

    def subjects_in(self, event: Event) -> list[str]:
        """The subject ids this rule finds in ``event``."""
        if not any(fnmatch.fnmatchcase(event.type, t) for t in self.types):
            return []
        found: list[str] = []
        for path in self.paths:
            value = _at(event.payload, path)
            if self.subject is not None:
                value = self.subject(value)
            if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
                continue
            if str(value) not in found:
                found.append(str(value))
        return found

    def __call__(self, event: Event) -> None:
        found = self.subjects_in(event)
        if found:
            self.store.link_subjects(
                event.tenant, event.run_id, [(event.seq, subject) for subject in found]
            )
