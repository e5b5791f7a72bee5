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

__all__ = ["BlobChecks", "check_file", "of_reports", "scans_of", "totals"]

BlobChecks = dict[tuple[str | None, str | None], BlobCheck]
"""``(tenant, run_id)`` -> the blob check of that run."""


def scans_of(store: Store) -> list[RowScan]:
    """The scan that checks each verified run's blobs against the store's blob folder
    (``<file>.blobs``), in the same read as its verification (and in its workers)."""
    return [BlobScan.beside(store)]


def of_reports(store: Store, reports: list[VerifyReport]) -> BlobChecks:
    """The blob check of every run reported, from what its verification's scan found. A run
    whose rows could not all be read (its report already fails) is checked again on its own
    (:func:`check_stored_blobs`, which reads only the rows that may name a blob), and left
    out if that cannot be read either."""
    out: BlobChecks = {}
    for report in reports:
        if report.run_id is None:
            continue
        check = report.scanned.get("blobs")
        if not isinstance(check, BlobCheck):
            try:
                check = check_stored_blobs(
                    store, report.run_id, BlobStore.beside(store), tenant=report.tenant
                )
            except Exception:
                continue
        out[report.tenant, report.run_id] = check
    return out


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
    }
