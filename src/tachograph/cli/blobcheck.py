"""``tacho verify``'s blob checks (SPEC section 6): a present blob must match its reference
(a mismatch fails check 5), a missing one is reported as expired, not as a failure."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..lifecycle.blobs import BlobCheck, BlobScan, BlobStore, check_blobs, check_stored_blobs
from ..record.event import Event, event_from_line
from ..record.scan import RowScan
from ..record.verify import VerifyReport, iter_jsonl_runs
from ..store import Store

__all__ = ["BlobChecks", "check_file", "headline", "of_report", "of_reports", "scans_of", "totals"]

BlobChecks = dict[tuple[str | None, str | None], BlobCheck]
"""``(tenant, run_id)`` -> the blob check of that run."""


def scans_of(store: Store) -> list[RowScan]:
    """The scan that checks each verified run's blobs against the store's blob folder
    (``<file>.blobs``), in the same read as its verification (and in its workers)."""
    return [BlobScan.beside(store)]


def of_report(store: Store, report: VerifyReport) -> BlobCheck | None:
    """The blob check of one reported run, from what its verification's scan found. A run
    whose scan said nothing (its rows could not all be read or decoded, so its report
    already fails) is checked again on its own (:func:`check_stored_blobs`, which reads only
    the rows that may name a blob); ``None`` if that cannot read it either. A run that
    verified has been read whole: a check of it that raises is an error, never dropped."""
    if report.run_id is None:
        return None
    check = report.scanned.get("blobs")
    if isinstance(check, BlobCheck):
        return check
    try:
        return check_stored_blobs(
            store, report.run_id, BlobStore.beside(store), tenant=report.tenant
        )
    except Exception:
        if report.ok:
            raise  # read whole as it verified: not a run whose rows could not be read
        return None  # a store error, or a payload that is not JSON: its report says so


def of_reports(store: Store, reports: list[VerifyReport]) -> BlobChecks:
    """:func:`of_report` of every run reported (those it gives ``None`` left out)."""
    out: BlobChecks = {}
    for report in reports:
        check = of_report(store, report)
        if check is not None:
            out[report.tenant, report.run_id] = check
    return out


def headline(report: VerifyReport, check: BlobCheck | None) -> str:
    """A run's verification line: :meth:`VerifyReport.render`, or for a run whose chain holds
    but whose blob fails, :meth:`BlobCheck.headline` (never "verified")."""
    if report.ok and check is not None and not check.ok:
        return check.headline(report.events)
    return report.render()


def _file_runs(path: Path) -> Iterator[list[Event]]:
    with path.open("rb") as handle:
        for _checker, parsed in iter_jsonl_runs(handle, source=str(path)):
            yield [event_from_line(line) for line in parsed if line is not None]


def check_file(path: Path, reports: list[VerifyReport]) -> BlobChecks:
    """The blobs of a JSONL file's verified runs, against ``FILE.blobs/`` (what
    ``tacho export --blobs`` writes); without that folder every referenced blob is missing."""
    blobs = BlobStore(f"{path}.blobs")
    ok = {(r.tenant, r.run_id) for r in reports if r.ok}
    out: BlobChecks = {}
    for events in _file_runs(path):
        if events and (events[0].tenant, events[0].run_id) in ok:
            out[events[0].tenant, events[0].run_id] = check_blobs(events, blobs)
    return out


def totals(checks: BlobChecks) -> dict[str, Any]:
    """The ``blobs`` summary of ``verify --json``."""
    return {
        "verified": sum(len(c.verified) for c in checks.values()),
        "expired": sum(len(c.expired) for c in checks.values()),
        "failed": sum(len(c.failures) for c in checks.values()),
        "malformed": sum(len(c.malformed) for c in checks.values()),
    }
