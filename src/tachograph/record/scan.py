"""Scans: something else to read from a run's stored rows while they are verified.

``tacho verify`` wants more of a run than its chain: the blobs it references (SPEC section
6) and the tool calls its record cannot vouch for. Each of those reads the same rows the
verification reads. A :class:`RowScan` is handed to the verification (``scans=`` of
``tachograph.store.verify_stored`` and ``verify_all``, and of :func:`~.verify.verify_run`)
and sees every page of rows as it is read, so a run is read once; with worker processes it
runs in the workers, beside the checks of each run or chunk, and the parent joins what the
chunks found. Its result is the report's ``scanned[scan.name]``.

A scan is a value that pickles (the workers receive it when they start): :meth:`RowScan.begin`
makes the part that reads one run, or one chunk of consecutive rows of a long run;
:meth:`RowScan.join` makes the run's result from its parts' results, in seq order. A part
that raises is dropped: the run's result is then ``None``, as it is for a run whose read
failed part way (its report fails check 1): a scan that did not see the whole run says
nothing rather than something partial.

This layer knows only rows; the scans themselves live with what they know
(``tachograph.lifecycle.blobs.BlobScan``, ``tachograph.capture.vouch.UnvouchedScan``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from .rows import StoredRow

__all__ = ["RowScan", "ScanPart", "Scanning", "join_parts"]


class ScanPart(Protocol):
    """What one scan reads of one run, or of one chunk of it."""

    def feed(self, rows: Sequence[StoredRow]) -> None:
        """The next rows, in seq order, as ``Store.read_rows`` gives them (plain tuples in
        the same order are accepted: index them, do not read them by name)."""

    def result(self) -> Any:
        """What this part found; it pickles (a worker sends it to the parent)."""


class RowScan(Protocol):
    """A scan handed to verification: see the module."""

    @property
    def name(self) -> str:
        """The key of its result in ``VerifyReport.scanned``."""

    def begin(self) -> ScanPart:
        """A part for one run, or for one chunk of a run's consecutive rows."""

    def join(self, run_id: str | None, parts: Sequence[Any]) -> Any:
        """The run's result from its parts' results, in seq order (one part for a run read
        whole)."""


Part = tuple[bool, Any]
"""A part's outcome: ``(True, result)``, or ``(False, None)`` if it raised."""


class Scanning:
    """The parts of some scans over one run or one chunk: fed each page, a part that raises
    is dropped."""

    __slots__ = ("_parts", "scans")

    def __init__(self, scans: Sequence[RowScan]) -> None:
        self.scans = tuple(scans)
        self._parts: list[ScanPart | None] = []
        for scan in self.scans:
            try:
                self._parts.append(scan.begin())
            except Exception:
                self._parts.append(None)  # as a part that raised

    def feed(self, rows: Sequence[Any]) -> None:
        """Hand ``rows`` (stored rows, in seq order) to every part still standing."""
        parts = self._parts
        for i, part in enumerate(parts):
            if part is None:
                continue
            try:
                part.feed(rows)
            except Exception:
                # A scan reads untrusted rows beside the verification; whatever it trips on
                # is not the verification's failure, and the run's result is None.
                parts[i] = None

    def outcomes(self) -> tuple[Part, ...]:
        """Each part's outcome, in the order of the scans."""
        out: list[Part] = []
        for part in self._parts:
            if part is None:
                out.append((False, None))
                continue
            try:
                out.append((True, part.result()))
            except Exception:
                out.append((False, None))
        return tuple(out)

    def joined(self, run_id: str | None) -> dict[str, Any]:
        """``{scan.name: result}`` of a run read whole by these parts."""
        return join_parts(self.scans, run_id, [self.outcomes()])

    def failed(self) -> dict[str, Any]:
        """``{scan.name: None}``: the run was not read whole."""
        return {scan.name: None for scan in self.scans}


def join_parts(
    scans: Sequence[RowScan], run_id: str | None, chunks: Sequence[Sequence[Part]]
) -> dict[str, Any]:
    """``{scan.name: result}`` of a run from the outcomes of its chunks, in seq order (each
    chunk's outcomes in the order of ``scans``)."""
    out: dict[str, Any] = {}
    for i, scan in enumerate(scans):
        outcomes = [chunk[i] for chunk in chunks]
        if not all(ok for ok, _ in outcomes):
            out[scan.name] = None
            continue
        try:
            out[scan.name] = scan.join(run_id, [result for _, result in outcomes])
        except Exception:
            out[scan.name] = None
    return out
