"""JSONL interchange (SPEC section 4): export runs exactly, import them only once verified."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

from ..errors import AppendRefused, FormatError, VerificationFailed
from .bulk import collector_paused
from .event import Event, event_from_line, stored_json
from .seal import Processor, Sealer
from .verify import VerifyReport, iter_jsonl_runs

if TYPE_CHECKING:  # record sits below store: a store is only handed in
    from ..store.base import Store

__all__ = [
    "ImportRefused",
    "ImportReport",
    "Refusal",
    "export_run",
    "import_jsonl",
    "read_jsonl",
    "read_jsonl_unverified",
    "verify_jsonl",
    "write_events",
]

_BATCH = 1000


def _line_bytes(event: Event) -> bytes:
    line = event.to_line()
    if event.payload is None and event.payload_bytes is not None:
        # Undecoded payload: splice the canonical bytes in, without a decode/encode round trip.
        line["payload"] = orjson.Fragment(event.payload_bytes)
    try:
        return orjson.dumps(line) + b"\n"
    except TypeError:
        # Text the store holds as bytes that are not UTF-8 (a file changed behind its back),
        # read back with lone surrogates for them: written as the stored bytes, so that the
        # export is the evidence byte for byte, and fails verification as the store does.
        return orjson.dumps({key: _stored_text(value) for key, value in line.items()}) + b"\n"


def _stored_text(value: Any) -> Any:
    """``value``, or a string holding lone surrogates as the JSON string of its stored bytes."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            quoted = json.dumps(value, ensure_ascii=False)  # leaves the surrogates as they are
            return orjson.Fragment(quoted.encode("utf-8", "surrogateescape"))
    return value


def write_events(events: Iterable[Event], out: IO[bytes]) -> int:
    """Write events as interchange lines; returns how many."""
    count = 0
    for event in events:
        out.write(_line_bytes(event))
        count += 1
    return count


def export_run(store: Store, run_id: str, out: IO[bytes], *, tenant: str | None = None) -> int:
    """Write one stored run to ``out`` as JSONL, in seq order; returns the event count."""
    return write_events(store.read(run_id, tenant=tenant, decode=False), out)


def _open_lines(source: str | os.PathLike[str] | IO[bytes]) -> Iterator[bytes]:
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise FormatError(f"no such file: {path}", location=str(path))
        with path.open("rb") as handle:
            yield from handle
    else:
        yield from source


def verify_jsonl(
    source: str | os.PathLike[str] | IO[bytes],
    *,
    progress: Callable[[int], None] | None = None,
) -> list[VerifyReport]:
    """Verify every run in a JSONL file (SPEC section 8); one report per run."""
    name = str(source) if isinstance(source, (str, os.PathLike)) else None
    reports = []
    for checker, parsed in iter_jsonl_runs(_open_lines(source), source=name):
        reports.append(checker.report())
        if progress is not None:
            progress(len(parsed))
    return reports


def read_jsonl(source: str | os.PathLike[str] | IO[bytes]) -> list[list[Event]]:
    """Read and verify a JSONL file; return its runs as lists of events.

    Raises :class:`VerificationFailed` (with ``reports``) if any run fails.
    """
    runs, failed = _read(source, keep_failed=False)
    if failed:
        raise VerificationFailed(
            "refused: " + "; ".join(r.render() for r in failed), reports=failed, report=failed[0]
        )
    return [events for events, _report in runs]


def read_jsonl_unverified(
    source: str | os.PathLike[str] | IO[bytes],
) -> list[tuple[list[Event], VerifyReport]]:
    """Read a JSONL file; return each run's events with its verification report, refusing
    none for failing to verify (replay's ``allow_unverified``, which labels the replay so).

    The lines of a run that are not events at all (malformed) are left out, as a gap its
    report names; a run whose lines parse but do not make events raises
    :class:`VerificationFailed`.
    """
    return _read(source, keep_failed=True)[0]


def _read(
    source: str | os.PathLike[str] | IO[bytes], *, keep_failed: bool
) -> tuple[list[tuple[list[Event], VerifyReport]], list[VerifyReport]]:
    name = str(source) if isinstance(source, (str, os.PathLike)) else None
    runs: list[tuple[list[Event], VerifyReport]] = []
    failed: list[VerifyReport] = []
    with collector_paused():  # every run of the file is held: see record/bulk.py
        for checker, parsed in iter_jsonl_runs(_open_lines(source), source=name):
            report = checker.report()
            if report.ok:
                runs.append(([_to_event(line) for line in parsed if line is not None], report))
                continue
            failed.append(report)
            if keep_failed:
                try:
                    events = [_to_event(line) for line in parsed if line is not None]
                except Exception as exc:
                    raise VerificationFailed(
                        f"refused: {report.render()}; its lines are not events "
                        f"({type(exc).__name__}: {exc})",
                        reports=[report],
                        report=report,
                    ) from None
                runs.append((events, report))
    return runs, failed


def _to_event(line: dict[str, Any]) -> Event:
    event = event_from_line(line)
    if event.payload is not None:
        object.__setattr__(event, "payload_bytes", stored_json(event.payload))
    return event


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an import stored nothing: the run and seq at fault (when known) and the reason."""

    reason: str
    """``verification``, ``conflict`` (the store holds other events there) or ``store``."""
    message: str
    run_id: str | None = None
    tenant: str | None = None
    seq: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "reason": self.reason,
            "message": self.message,
            "run_id": self.run_id,
            "tenant": self.tenant,
            "seq": self.seq,
        }


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What an import did: runs and events seen, events written, duplicates skipped.

    An import is atomic: ``stored`` is true when the whole file is in the store (``written``
    new events, ``duplicates`` already there), false when nothing of it was stored; then
    ``refused`` says why.
    """

    runs: tuple[VerifyReport, ...]
    events: int
    written: int
    duplicates: int
    redacted: int = 0
    """Events whose payload or actor the processors changed (their runs were re-chained)."""
    refused: tuple[Refusal, ...] = ()

    @property
    def stored(self) -> bool:
        """True when the file was stored whole."""
        return not self.refused

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "ok": self.stored,
            "stored": self.stored,
            "runs": [r.to_dict() for r in self.runs],
            "events": self.events,
            "written": self.written,
            "duplicates": self.duplicates,
            "redacted": self.redacted,
            "refused": [r.to_dict() for r in self.refused],
        }


class ImportRefused(AppendRefused):
    """An import that stored nothing because the store refused part of it; ``report`` is the
    :class:`ImportReport` (``stored`` false, ``refused`` naming the event)."""

    report: ImportReport


def import_jsonl(
    store: Store,
    source: str | os.PathLike[str] | IO[bytes],
    *,
    progress: Callable[[int], None] | None = None,
    processors: Sequence[Processor] = (),
) -> ImportReport:
    """Verify every run in the file, then store them all in one atomic unit.

    Before they are stored, payloads pass through exactly ``processors`` (none: the file is
    stored as it is), through :meth:`Sealer.reseal`, as a recording's do: the default
    idempotency keys and the prompt hashes are derived again from the processed data, so that
    an import cannot bring into the store what recording would have kept out. A run that
    changes is re-chained from the first changed event (same ids, timestamps and salts; new
    digests, keys and hashes), and ``redacted`` counts the events whose payload or actor
    changed. The
    facade's :func:`tachograph.import_jsonl` and ``tacho import`` put the default redaction
    first (:func:`tachograph.capture.imports.import_jsonl`).

    Nothing is stored if any run fails verification: :class:`VerificationFailed` is raised with
    the reports (``err.reports``), each naming the run, the seq and the failed check. Nothing is
    stored either if the store refuses any event (another event at that seq, an event id
    already used): :class:`ImportRefused` is raised with ``err.report``. A store that fails
    (a full disk, an I/O error) raises :class:`~tachograph.errors.StoreUnavailable`, again with
    nothing stored: the events go in one transaction (:meth:`Store.append_all`). Events
    already stored are skipped. A file given by path is read twice (verify, then store) so
    memory stays flat; a stream is held.
    """
    if not isinstance(source, (str, os.PathLike)):
        data = source.read()
        source_lines: Any = data.splitlines(keepends=True)
    else:
        source_lines = source
    reports = verify_jsonl(source_lines)
    failed = [r for r in reports if not r.ok]
    if failed:
        raise VerificationFailed(
            "import refused, nothing stored: " + "; ".join(r.render() for r in failed),
            reports=failed,
            report=failed[0],
        )
    chain = tuple(processors)
    total = sum(r.events for r in reports)
    redacted = 0

    def batches() -> Iterator[list[Event]]:
        nonlocal redacted
        batch: list[Event] = []
        for _checker, parsed in iter_jsonl_runs(_open_lines(source_lines)):
            sealer: Sealer | None = None
            for line in parsed:
                if line is None:  # pragma: no cover - verification refused such files above
                    continue
                event = _to_event(line)
                if chain:
                    if sealer is None:
                        sealer = Sealer(
                            run_id=event.run_id,
                            actor=event.actor,
                            tenant=event.tenant,
                            processors=chain,
                        )
                    # the one write pipeline, as a recording through these processors
                    resealed = sealer.reseal(event)
                    redacted += (
                        resealed.payload_digest != event.payload_digest
                        or resealed.actor != event.actor
                    )
                    event = resealed
                batch.append(event)
                if len(batch) >= _BATCH:
                    yield batch
                    batch = []
        if batch:
            yield batch

    try:
        written, duplicates = store.append_all(batches(), progress=progress)
    except AppendRefused as exc:
        refusal = Refusal(
            "conflict",
            str(exc),
            run_id=getattr(exc, "run_id", None),
            tenant=getattr(exc, "tenant", None),
            seq=getattr(exc, "seq", None),
        )
        report = ImportReport(tuple(reports), total, 0, 0, redacted=redacted, refused=(refusal,))
        raise ImportRefused(
            f"import refused, nothing stored: {exc}",
            report=report,
            run_id=refusal.run_id,
            seq=refusal.seq,
        ) from exc
    return ImportReport(tuple(reports), total, written, duplicates, redacted=redacted)
